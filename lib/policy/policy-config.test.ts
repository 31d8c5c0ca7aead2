// The policy's rules hold the same way wherever a policy comes from: the configuration and the policy
// file refuse what the DetectionPolicy CRD refuses.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadPolicyConfig } from './policy-config.ts';
import { parsePolicy } from './policy-file.ts';

const policy = (over: object) =>
  JSON.stringify({
    source: { name: 'default', generation: 1 },
    thresholds: { allow: 0.1, block: 0.9 },
    model: 'mobilenet_v2',
    anonymous: { perMinute: 10, perDay: 30 },
    tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } },
    upload: { maxBytes: 52_428_800 },
    ...over,
  });

describe('allow < block', () => {
  it('holds in the configuration', () => {
    expect(loadPolicyConfig({}).thresholds).toEqual({ allow: 0.1, block: 0.9 });
    expect(() => loadPolicyConfig({ THRESHOLD_ALLOW: '0.5', THRESHOLD_BLOCK: '0.5' })).toThrow(
      'THRESHOLD_ALLOW must be less than THRESHOLD_BLOCK (the review band lies between them), got 0.5 and 0.5',
    );
    expect(() => loadPolicyConfig({ THRESHOLD_ALLOW: '0.6', THRESHOLD_BLOCK: '0.5' })).toThrow(
      /THRESHOLD_ALLOW/,
    );
  });

  it('holds in the policy file', () => {
    expect(parsePolicy(policy({})).thresholds).toEqual({ allow: 0.1, block: 0.9 });
    expect(() => parsePolicy(policy({ thresholds: { allow: 0.5, block: 0.5 } }))).toThrow(
      'thresholds.allow must be less than thresholds.block (the review band lies between them), got 0.5 and 0.5',
    );
  });
});

describe('perMinute <= perDay', () => {
  it('holds in the configuration, for anonymous callers and every tier', () => {
    expect(loadPolicyConfig({ ANON_PER_MINUTE: '30', ANON_PER_DAY: '30' }).anonymous).toEqual({
      perMinute: 30,
      perDay: 30,
    });
    expect(() => loadPolicyConfig({ ANON_PER_MINUTE: '31', ANON_PER_DAY: '30' })).toThrow(
      'ANON_PER_MINUTE (31) must not exceed ANON_PER_DAY (30)',
    );
    expect(() => loadPolicyConfig({ FREE_PER_MINUTE: '101' })).toThrow(/FREE_PER_MINUTE \(101\)/);
    expect(() => loadPolicyConfig({ PRO_PER_DAY: '5' })).toThrow(
      /PRO_PER_MINUTE \(30\) must not exceed PRO_PER_DAY \(5\)/,
    );
  });

  it('holds in the policy file', () => {
    expect(() => parsePolicy(policy({ anonymous: { perMinute: 31, perDay: 30 } }))).toThrow(
      'anonymous.perMinute (31) must not exceed anonymous.perDay (30)',
    );
    const tiers = { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 29 } };
    expect(() => parsePolicy(policy({ tiers }))).toThrow(/tiers.pro.perMinute/);
  });

  it('holds in the DetectionPolicy CRD, for anonymous callers and every tier', () => {
    const crd = readFileSync(
      new URL('../../charts/nsfwdetector/crds/detectionpolicies.yaml', import.meta.url),
      'utf8',
    );
    expect(crd).toContain('rule: self.allow < self.block');
    expect(crd.match(/rule: self\.perMinute <= self\.perDay/g)?.length).toBe(3);
  });
});
