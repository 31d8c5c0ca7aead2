// The capability behind every rate limit: fixed windows aligned to the UTC minute and the UTC day,
// checked and counted in one atomic step. The in-memory store serves the embedded process; the Redis
// store (one Lua script, Redis TIME as the clock) serves replicas that must share one count.

import type { WindowLimits } from '../../lib/policy/rules.ts';

export interface WindowState {
  /** Requests counted in the current window, after this call. */
  used: number;
  limit: number;
  /** Unix seconds at which the window ends. */
  resetAt: number;
}

export type QuotaOutcome = (
  | { allowed: true; minute: WindowState; day: WindowState }
  | {
      allowed: false;
      /** The window that refused; when both are full the day wins, since waiting a minute won't help. */
      refusedBy: 'minute' | 'day';
      /** Whole seconds until the refusing window resets (at least 1). */
      retryAfterSeconds: number;
      minute: WindowState;
      day: WindowState;
    }
) & {
  /** The id to refund this charge by, when the store derives one from the request id (Redis: it
   * names the slot the charge lives in); otherwise the request id itself. */
  chargeId?: string;
};

export interface QuotaStore {
  /**
   * Counts one request for `subject` in both windows if, and only if, both allow it. With a
   * `requestId` the charge is recorded under it, so that `refund(requestId)` can take it back.
   */
  consume(
    subject: string,
    limits: WindowLimits,
    requestId?: string,
    history?: readonly string[],
  ): Promise<QuotaOutcome>;
  /**
   * Uncounts the request counted under `id`: the outcome's `chargeId` when it had one, else the
   * request id (also the request id of a consume that failed) (a request answered 503 must not use quota).
   * Idempotent, and exact whatever the order: it uncounts only the windows that request was counted
   * in (not the next minute's), and a refund that arrives before its consume (a timed-out call still
   * in flight) cancels that consume instead.
   */
  refund(id: string): Promise<void>;
  /** Current counts without consuming (console usage, admin CLI). */
  peek(subject: string, limits: WindowLimits): Promise<{ minute: WindowState; day: WindowState }>;
  /**
   * Served and refused requests per UTC day, oldest first, for the last `days` days including today,
   * of a history subject (an account's or a key's, given to `consume` in `history`). A served request
   * that is refunded is uncounted here too.
   */
  history(subject: string, days: number): Promise<DayUsage[]>;
  /** Counts a request from a device id for the day (abuse tracking only; never refuses). */
  trackDevice(deviceId: string): Promise<void>;
  close(): Promise<void>;
}

/** One UTC day of a usage history. */
export interface DayUsage {
  /** The day, YYYY-MM-DD (UTC). */
  day: string;
  served: number;
  refused: number;
}

/** Days of usage history kept (the console's 30-day chart, plus the day that is ending). */
export const HISTORY_DAYS = 31;

/** The YYYY-MM-DD of each of the last `days` UTC days, oldest first, with its day start in ms. */
export function historyDays(nowMs: number, days: number): { day: string; dayStart: number }[] {
  const today = nowMs - (nowMs % DAY_MS);
  return Array.from({ length: days }, (_, i) => {
    const dayStart = today - (days - 1 - i) * DAY_MS;
    return { day: new Date(dayStart).toISOString().slice(0, 10), dayStart };
  });
}

/**
 * How long a charge stays refundable: longer than any request lives (request timeout 120 s). In Redis
 * that is one small hash per counted request, kept this long.
 */
export const CHARGE_TTL_MS = 150_000;

type Windows = { minute: WindowState; day: WindowState };

/** The window that refuses one more request, if any: the day when both are full. */
export function fullWindow({ minute, day }: Windows): 'minute' | 'day' | undefined {
  if (day.used >= day.limit) return 'day';
  if (minute.used >= minute.limit) return 'minute';
  return undefined;
}

/** A refusal by window `by`: Retry-After is the seconds left until that window's end. */
export function refusal(by: 'minute' | 'day', { minute, day }: Windows, nowMs: number): QuotaOutcome {
  const end = (by === 'day' ? day : minute).resetAt * 1000;
  return { allowed: false, refusedBy: by, retryAfterSeconds: retryAfterSeconds(nowMs, end), minute, day };
}

/** The outcome `consume` would have, from current counts (a check that counts nothing). */
export function outcomeOf({ minute, day }: Windows, nowMs: number): QuotaOutcome {
  const full = fullWindow({ minute, day });
  return full === undefined ? { allowed: true, minute, day } : refusal(full, { minute, day }, nowMs);
}

export const MINUTE_MS = 60_000;
export const DAY_MS = 86_400_000;

/** Window boundaries for a moment, shared by every store so they cannot disagree. */
export function windowsAt(nowMs: number): {
  minuteStart: number;
  minuteEnd: number;
  dayStart: number;
  dayEnd: number;
} {
  const minuteStart = Math.floor(nowMs / MINUTE_MS) * MINUTE_MS;
  const dayStart = Math.floor(nowMs / DAY_MS) * DAY_MS;
  return { minuteStart, minuteEnd: minuteStart + MINUTE_MS, dayStart, dayEnd: dayStart + DAY_MS };
}

export function retryAfterSeconds(nowMs: number, windowEndMs: number): number {
  return Math.max(1, Math.ceil((windowEndMs - nowMs) / 1000));
}
