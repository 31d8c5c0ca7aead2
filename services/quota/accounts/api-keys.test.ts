import { describe, expect, it } from 'vitest';
import {
  bearerKey,
  displayParts,
  generateApiKey,
  isValidApiKeyFormat,
  maskedKey,
  sha256Hex,
} from './api-keys.ts';

describe('API keys', () => {
  it('generates nsk_live_ + 32 lowercase hex, never twice the same', () => {
    const keys = new Set(Array.from({ length: 200 }, generateApiKey));
    expect(keys.size).toBe(200);
    for (const key of keys) {
      expect(key).toMatch(/^nsk_live_[0-9a-f]{32}$/);
      expect(isValidApiKeyFormat(key)).toBe(true);
    }
  });

  it('validates the format strictly', () => {
    const hex = '0123456789abcdef0123456789abcdef';
    expect(isValidApiKeyFormat(`nsk_live_${hex}`)).toBe(true);
    for (const bad of [
      `nsk_live_${hex.toUpperCase()}`,
      `nsk_live_${hex}0`,
      `nsk_live_${hex.slice(1)}`,
      `nsk_test_${hex}`,
      ` nsk_live_${hex}`,
      `nsk_live_${hex.slice(1)}g`,
      '',
      undefined,
      42,
    ]) {
      expect(isValidApiKeyFormat(bad)).toBe(false);
    }
  });

  it('hashes with SHA-256 and shows only a prefix and the last 4', () => {
    const key = 'nsk_live_0123456789abcdef0123456789abcdef';
    // printf %s <key> | sha256sum
    expect(sha256Hex(key)).toBe('f8fb14524f0ce2a2470a568a51de4f7227b01464f06056204c5244d38f40f66f');
    expect(displayParts(key)).toEqual({ prefix: 'nsk_live_0123', last4: 'cdef' });
    expect(maskedKey(displayParts(key))).toBe('nsk_live_0123…cdef');
  });

  it('reads the key from exactly `Bearer <key>`', () => {
    const key = generateApiKey();
    expect(bearerKey(`Bearer ${key}`)).toBe(key);
    expect(bearerKey(`bearer   ${key}`)).toBe(key);
    expect(bearerKey(`Bearer ${key} `)).toBe(key);
    expect(bearerKey(undefined)).toBeUndefined();
    expect(bearerKey(key)).toBeUndefined();
    expect(bearerKey(`Bearer ${key} extra`)).toBeUndefined();
    expect(bearerKey(`Token ${key}`)).toBeUndefined();
    expect(bearerKey(`Bearer ${key.toUpperCase()}`)).toBeUndefined();
  });
});
