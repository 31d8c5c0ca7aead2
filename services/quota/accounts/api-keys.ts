// API key and token helpers (spec 5.2: `nsk_live_` + 32 hex; DESIGN: lowercase, stored as SHA-256).

import { createHash, randomBytes } from 'node:crypto';

export const KEY_PREFIX = 'nsk_live_';
const KEY_FORMAT = /^nsk_live_[0-9a-f]{32}$/;

/** A new secret: `nsk_live_` + 32 lowercase hex from 16 random bytes. */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(16).toString('hex');
}

export function isValidApiKeyFormat(value: unknown): value is string {
  return typeof value === 'string' && KEY_FORMAT.test(value);
}

/** SHA-256 hex of a secret (API key or session token): the only form ever stored. */
export function sha256Hex(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** What listings show instead of the secret. */
export function displayParts(secret: string): { prefix: string; last4: string } {
  return { prefix: secret.slice(0, KEY_PREFIX.length + 4), last4: secret.slice(-4) };
}

/** e.g. `nsk_live_3f9a…b2c1`. */
export function maskedKey(record: { prefix: string; last4: string }): string {
  return `${record.prefix}…${record.last4}`;
}

/**
 * The key from an Authorization header: exactly `Bearer <key>` (scheme case-insensitive, one space or
 * more). Undefined for anything else, including a well-formed header with a malformed key.
 */
export function bearerKey(authorization: string | undefined): string | undefined {
  if (authorization === undefined) return undefined;
  const match = /^Bearer +(\S+)\s*$/i.exec(authorization);
  const key = match?.[1];
  return isValidApiKeyFormat(key) ? key : undefined;
}

export function newId(prefix: 'acc_' | 'key_'): string {
  return prefix + randomBytes(8).toString('hex');
}

/** 64 hex chars of randomness for console session cookies. */
export function generateSessionToken(): string {
  return randomBytes(32).toString('hex');
}
