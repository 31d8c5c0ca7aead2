// A site-wide total shared out between networks: one network (an IPv4 /24, an IPv6 /48: what one
// subscriber or one site can hold, lib/common/client-key.ts networkKey) may take at most its share of
// the total in each window, so that no one network can drain what everyone else needs; it takes
// 100 / sharePercent networks to drain it. Counted with the total in one atomic step (both or neither),
// in both stores (memory-shared-budget.ts, redis-shared-budget.ts). The windows are the quota windows
// (UTC minute, UTC day). A charge can be given back (a sign-up that created nothing), exactly once
// and only in the windows it was counted in.

import type { WindowLimits } from '../../lib/policy/rules.ts';
import { type QuotaOutcome, refusal, type WindowState, windowsAt } from './quota-store.ts';

/** What one consume counted: the budget, the member and the windows, so that a refund is exact. */
export interface ShareCharge {
  budget: string;
  member: string;
  minuteStart: number;
  dayStart: number;
}

/** The outcome of the tighter of the two bounds (the member's share, the total), plus the charge. */
export type ShareOutcome = QuotaOutcome & {
  /** Which bound refused: the member's share or the total. */
  refusedByBound?: 'share' | 'total';
  charge?: ShareCharge;
};

export interface SharedBudgetStore {
  /**
   * Counts one for `member` in `budget` if, and only if, the budget's total and the member's share
   * both allow it in both windows (the share of each window: shareLimits).
   */
  consumeShare(
    budget: string,
    member: string,
    total: WindowLimits,
    sharePercent: number,
  ): Promise<ShareOutcome>;
  /** Uncounts a charge from its windows (not from later ones). Call once per charge. */
  refundShare(charge: ShareCharge): Promise<void>;
}

/** A member's bound: `sharePercent` of each window's total, at least one. */
export function shareLimits(total: WindowLimits, sharePercent: number): WindowLimits {
  const of = (n: number) => Math.max(1, Math.floor((n * sharePercent) / 100));
  return { perMinute: of(total.perMinute), perDay: of(total.perDay) };
}

/** Counts in the current windows: the total's and the member's. */
export interface ShareCounts {
  totalMinute: number;
  totalDay: number;
  memberMinute: number;
  memberDay: number;
}

/**
 * The decision both stores make on the counts before this consume: refused by the first full window
 * (the day before the minute, the share before the total), else allowed with the counts after it.
 */
export function shareDecision(
  counts: ShareCounts,
  total: WindowLimits,
  sharePercent: number,
  nowMs: number,
): { allowed: boolean; outcome: ShareOutcome } {
  const share = shareLimits(total, sharePercent);
  const w = windowsAt(nowMs);
  const state = (minute: number, day: number, limits: WindowLimits) => ({
    minute: { used: minute, limit: limits.perMinute, resetAt: w.minuteEnd / 1000 } satisfies WindowState,
    day: { used: day, limit: limits.perDay, resetAt: w.dayEnd / 1000 } satisfies WindowState,
  });
  const memberState = state(counts.memberMinute, counts.memberDay, share);
  const totalState = state(counts.totalMinute, counts.totalDay, total);
  for (const by of ['day', 'minute'] as const) {
    for (const [bound, s] of [
      ['share', memberState],
      ['total', totalState],
    ] as const) {
      if (s[by].used >= s[by].limit)
        return { allowed: false, outcome: { ...refusal(by, s, nowMs), refusedByBound: bound } };
    }
  }
  const after = state(counts.memberMinute + 1, counts.memberDay + 1, share);
  return { allowed: true, outcome: { allowed: true, ...after } };
}
