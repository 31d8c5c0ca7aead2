// The rules every source of a policy obeys — the configuration (THRESHOLD_*, *_PER_MINUTE/_PER_DAY),
// the policy file and the DetectionPolicy CRD (its x-kubernetes-validations say the same): one check
// each, so the three cannot drift apart.

import { belowProblem } from '../common/config.ts';

export interface Thresholds {
  allow: number;
  block: number;
}

/** A quota: requests per minute and per day (anonymous callers per IP, accounts by tier, logins, ...). */
export interface WindowLimits {
  perMinute: number;
  perDay: number;
}

/**
 * Spec 2: allow when nsfw < allow, review when allow <= nsfw < block, block when nsfw >= block; the
 * review band exists only while allow < block, so equal thresholds are refused too. The settings
 * table's rule (THRESHOLD_ALLOW below THRESHOLD_BLOCK), which the chart checks too.
 */
export function thresholdsProblem(
  t: Thresholds,
  names = { allow: 'allow', block: 'block' },
): string | undefined {
  return belowProblem('THRESHOLD_ALLOW', t.allow, t.block, { value: names.allow, limit: names.block });
}

/** A day holds every minute: a per-minute limit above the per-day one could never be reached. */
export function windowLimitsProblem(
  l: WindowLimits,
  names = { perMinute: 'perMinute', perDay: 'perDay' },
): string | undefined {
  return l.perMinute <= l.perDay
    ? undefined
    : `${names.perMinute} (${l.perMinute}) must not exceed ${names.perDay} (${l.perDay})`;
}
