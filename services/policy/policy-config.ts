// The policy's part of the configuration: what applies while no valid policy file is mounted
// (POLICY_FILE, the operator's ConfigMap). Read by every process that decides or counts.

import type { AccountTier } from '../common/account-tier.ts';
import { ConfigError, type Env, intVar, numberVar, optionalVar } from '../common/config.ts';
import { DEFAULT_MAX_FILE_BYTES } from '../common/http-limits.ts';
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

function windowVars(env: Env, prefix: string, perMinute: number, perDay: number): WindowLimits {
  const names = { perMinute: `${prefix}_PER_MINUTE`, perDay: `${prefix}_PER_DAY` };
  const limits = {
    perMinute: intVar(env, names.perMinute, perMinute, 0),
    perDay: intVar(env, names.perDay, perDay, 0),
  };
  const problem = windowLimitsProblem(limits, names);
  if (problem) throw new ConfigError(problem);
  return limits;
}

export function loadPolicyConfig(env: Env): PolicyConfig {
  const thresholds = {
    allow: numberVar(env, 'THRESHOLD_ALLOW', 0.1, 0, 1),
    block: numberVar(env, 'THRESHOLD_BLOCK', 0.9, 0, 1),
  };
  const problem = thresholdsProblem(thresholds, { allow: 'THRESHOLD_ALLOW', block: 'THRESHOLD_BLOCK' });
  if (problem) throw new ConfigError(problem);
  return {
    thresholds,
    maxFileBytes: intVar(env, 'MAX_FILE_BYTES', DEFAULT_MAX_FILE_BYTES, 1),
    anonymous: windowVars(env, 'ANON', 10, 30),
    tiers: { free: windowVars(env, 'FREE', 10, 100), pro: windowVars(env, 'PRO', 30, 10_000) },
    policyFile: optionalVar(env, 'POLICY_FILE'),
  };
}
