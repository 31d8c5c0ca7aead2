// A policy file states what it changes: what it leaves out stays as the process is configured.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadPolicyConfig } from './policy-config.ts';
import { parsePolicy } from './policy-file.ts';
import { policyInForce } from './policy-in-force.ts';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const log = { info: () => undefined, error: () => undefined };

/** policyInForce over a policy file holding `doc`, with the configuration `env`. */
function inForce(doc: object, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-policy-merge-'));
  dirs.push(dir);
  const file = join(dir, 'policy.json');
  writeFileSync(file, JSON.stringify({ source: { name: 'main', generation: 1 }, ...doc }));
  return policyInForce(loadPolicyConfig({ ...env, POLICY_FILE: file }), log);
}

describe('a policy that states only its thresholds', () => {
  it("changes only the thresholds: every limit stays at the spec's numbers", () => {
    const policy = inForce({ thresholds: { allow: 0.2, block: 0.7 } });
    try {
      expect(policy.source()).toEqual({ name: 'main', generation: 1 });
      expect(policy.thresholds()).toEqual({ allow: 0.2, block: 0.7 });
      expect(policy.limits()).toEqual({
        anonymous: { perMinute: 10, perDay: 30 },
        tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } },
      });
      expect(policy.maxFileBytes()).toBe(52_428_800);
      expect(policy.model()).toBeUndefined();
      expect(policy.maxFramesScored()).toBeUndefined();
    } finally {
      policy.close();
    }
  });

  it('leaves the configured limits where the deployment sets its own', () => {
    const policy = inForce(
      { thresholds: { allow: 0.2, block: 0.7 } },
      { ANON_PER_DAY: '50', PRO_PER_MINUTE: '60', MAX_FILE_BYTES: '1000000' },
    );
    try {
      expect(policy.thresholds()).toEqual({ allow: 0.2, block: 0.7 });
      expect(policy.limits()).toEqual({
        anonymous: { perMinute: 10, perDay: 50 },
        tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 60, perDay: 10_000 } },
      });
      expect(policy.maxFileBytes()).toBe(1_000_000);
    } finally {
      policy.close();
    }
  });
});

describe('a policy that states a window', () => {
  it('changes that window and no other; its model, a lower upload limit and its frames scored apply', () => {
    const policy = inForce({
      tiers: { pro: { perMinute: 100, perDay: 50_000 } },
      model: 'inception_v3',
      upload: { maxBytes: 1000 },
      maxFramesScored: 8,
    });
    try {
      expect(policy.thresholds()).toEqual({ allow: 0.1, block: 0.9 });
      expect(policy.limits()).toEqual({
        anonymous: { perMinute: 10, perDay: 30 },
        tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 100, perDay: 50_000 } },
      });
      expect(policy.model()).toBe('inception_v3');
      expect(policy.maxFileBytes()).toBe(1000);
      expect(policy.maxFramesScored()).toBe(8);
    } finally {
      policy.close();
    }
  });
});

describe('the policy file', () => {
  it('holds only what the policy states', () => {
    expect(
      parsePolicy('{"source":{"name":"main","generation":3},"thresholds":{"allow":0.2,"block":0.7}}'),
    ).toEqual({ source: { name: 'main', generation: 3 }, thresholds: { allow: 0.2, block: 0.7 } });
  });

  it('refuses a group given in part, and a model spelt otherwise than MODEL spells it', () => {
    const source = { name: 'main', generation: 1 };
    expect(() => parsePolicy(JSON.stringify({ source, thresholds: { allow: 0.2 } }))).toThrow(
      /thresholds.block must be a number/,
    );
    expect(() => parsePolicy(JSON.stringify({ source, anonymous: { perDay: 5 } }))).toThrow(
      /anonymous.perMinute must be a number/,
    );
    expect(() => parsePolicy(JSON.stringify({ source, model: 'MobileNetV2' }))).toThrow(
      'model must be one of mobilenet_v2, inception_v3, open_nsfw or several joined by +, got "MobileNetV2"',
    );
  });
});
