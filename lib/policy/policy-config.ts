// The policy's part of the configuration: what applies while no valid policy file is mounted
// (POLICY_FILE, the operator's ConfigMap). Read by every process that decides or counts.

import type { AccountTier } from '../common/account-tier.ts';
import { ConfigError, type Env, intSetting, numberSetting, optionalStringSetting } from '../common/config.ts';
import { type Thresholds, thresholdsProblem, type WindowLimits, windowLimitsProblem } from './rules.ts';

export interface PolicyConfig {
  thresholds: Thresholds;
  maxFileBytes: number;
  anonymous: WindowLimits;
  /** Per-account quotas by tier (spec 8; free per minute: DESIGN, configurable). */
  tiers: Record<AccountTier, WindowLimits>;
  /** The mounted policy file the operator renders (DetectionPolicy); watched, applied per request. */
  policyFile: string | undefined;
}

function windowVars(env: Env, prefix: 'ANON' | 'FREE' | 'PRO'): WindowLimits {
  const names = { perMinute: `${prefix}_PER_MINUTE`, perDay: `${prefix}_PER_DAY` } as const;
  const limits = {
    perMinute: intSetting(env, names.perMinute),
    perDay: intSetting(env, names.perDay),
  };
  const problem = windowLimitsProblem(limits, names);
  if (problem) throw new ConfigError(problem);
  return limits;
}

export function loadPolicyConfig(env: Env): PolicyConfig {
  const thresholds = {
    allow: numberSetting(env, 'THRESHOLD_ALLOW'),
    block: numberSetting(env, 'THRESHOLD_BLOCK'),
  };
  const problem = thresholdsProblem(thresholds, { allow: 'THRESHOLD_ALLOW', block: 'THRESHOLD_BLOCK' });
  if (problem) throw new ConfigError(problem);
  return {
    thresholds,
    maxFileBytes: intSetting(env, 'MAX_FILE_BYTES'),
    anonymous: windowVars(env, 'ANON'),
    tiers: { free: windowVars(env, 'FREE'), pro: windowVars(env, 'PRO') },
    policyFile: optionalStringSetting(env, 'POLICY_FILE'),
  };
}
