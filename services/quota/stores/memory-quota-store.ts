// In-process QuotaStore for the embedded default. JavaScript runs one callback at a time, so the
// check-then-increment below is atomic without locks. Entries of past windows are swept so that a
// stream of distinct client IPs cannot grow the map without bound.

import type { WindowLimits } from '../../../lib/policy/rules.ts';
import {
  CHARGE_TTL_MS,
  DAY_MS,
  type DayUsage,
  fullWindow,
  HISTORY_DAYS,
  historyDays,
  type QuotaOutcome,
  type QuotaStore,
  refusal,
  type WindowState,
  windowsAt,
} from '../quota-store.ts';
import type { ShareCharge, SharedBudgetStore, ShareOutcome } from '../shared-budget.ts';
import { MemorySharedBudget } from './memory-shared-budget.ts';

interface Counters {
  minuteStart: number;
  minuteCount: number;
  dayStart: number;
  dayCount: number;
}

const SWEEP_EVERY = 10_000;

/** A counted request, kept so it can be refunded; `refunded` marks a refund (or a cancelled id). */
interface Charge {
  subject: string;
  minuteStart: number;
  dayStart: number;
  at: number;
  refunded: boolean;
  /** History subjects the request was counted as served under. */
  history: readonly string[];
}

export class MemoryQuotaStore implements QuotaStore, SharedBudgetStore {
  readonly #counters = new Map<string, Counters>();
  readonly #devices = new Map<string, { dayStart: number; count: number }>();
  readonly #charges = new Map<string, Charge>();
  /** History subject → day start (ms) → counts; days past HISTORY_DAYS are swept. */
  readonly #history = new Map<string, Map<number, { served: number; refused: number }>>();
  readonly #now: () => number;
  readonly #shared: MemorySharedBudget;
  #writes = 0;

  constructor(now: () => number = Date.now) {
    this.#now = now;
    this.#shared = new MemorySharedBudget(now);
  }

  consumeShare(
    budget: string,
    member: string,
    total: WindowLimits,
    sharePercent: number,
  ): Promise<ShareOutcome> {
    return this.#shared.consumeShare(budget, member, total, sharePercent);
  }

  refundShare(charge: ShareCharge): Promise<void> {
    return this.#shared.refundShare(charge);
  }

  async consume(
    subject: string,
    limits: WindowLimits,
    requestId?: string,
    history: readonly string[] = [],
  ): Promise<QuotaOutcome> {
    const nowMs = this.#now();
    const w = windowsAt(nowMs);
    if (requestId !== undefined && this.#charges.has(requestId))
      throw new Error(`Request ${requestId} was already counted or refunded`);
    const c = this.#current(subject, w.minuteStart, w.dayStart);
    const state = (): { minute: WindowState; day: WindowState } => ({
      minute: { used: c.minuteCount, limit: limits.perMinute, resetAt: w.minuteEnd / 1000 },
      day: { used: c.dayCount, limit: limits.perDay, resetAt: w.dayEnd / 1000 },
    });
    const full = fullWindow(state());
    if (full !== undefined) {
      this.#record(history, w.dayStart, 'refused', 1);
      return refusal(full, state(), nowMs);
    }
    c.minuteCount += 1;
    c.dayCount += 1;
    this.#counters.set(subject, c);
    this.#record(history, w.dayStart, 'served', 1);
    if (requestId !== undefined) {
      this.#charges.set(requestId, {
        subject,
        minuteStart: w.minuteStart,
        dayStart: w.dayStart,
        at: nowMs,
        refunded: false,
        history,
      });
    }
    this.#maybeSweep(w.dayStart);
    return { allowed: true, ...state() };
  }

  async refund(requestId: string): Promise<void> {
    const charge = this.#charges.get(requestId);
    const nowMs = this.#now();
    if (!charge) {
      this.#charges.set(requestId, {
        subject: '',
        minuteStart: 0,
        dayStart: 0,
        at: nowMs,
        refunded: true,
        history: [],
      });
      return;
    }
    if (charge.refunded) return;
    charge.refunded = true;
    this.#record(charge.history, charge.dayStart, 'served', -1);
    const c = this.#counters.get(charge.subject);
    if (!c) return;
    // Only the windows it was counted in: a refund after the minute rolled over leaves the new one be.
    if (c.minuteStart === charge.minuteStart && c.minuteCount > 0) c.minuteCount -= 1;
    if (c.dayStart === charge.dayStart && c.dayCount > 0) c.dayCount -= 1;
  }

  async peek(subject: string, limits: WindowLimits): Promise<{ minute: WindowState; day: WindowState }> {
    const w = windowsAt(this.#now());
    const c = this.#current(subject, w.minuteStart, w.dayStart);
    return {
      minute: { used: c.minuteCount, limit: limits.perMinute, resetAt: w.minuteEnd / 1000 },
      day: { used: c.dayCount, limit: limits.perDay, resetAt: w.dayEnd / 1000 },
    };
  }

  async history(subject: string, days: number): Promise<DayUsage[]> {
    const byDay = this.#history.get(subject);
    return historyDays(this.#now(), days).map(({ day, dayStart }) => ({
      day,
      served: byDay?.get(dayStart)?.served ?? 0,
      refused: byDay?.get(dayStart)?.refused ?? 0,
    }));
  }

  #record(subjects: readonly string[], dayStart: number, field: 'served' | 'refused', delta: 1 | -1): void {
    for (const subject of subjects) {
      const byDay = this.#history.get(subject) ?? new Map<number, { served: number; refused: number }>();
      this.#history.set(subject, byDay);
      const counts = byDay.get(dayStart) ?? { served: 0, refused: 0 };
      counts[field] = Math.max(0, counts[field] + delta);
      byDay.set(dayStart, counts);
    }
  }

  async trackDevice(deviceId: string): Promise<void> {
    const { dayStart } = windowsAt(this.#now());
    const entry = this.#devices.get(deviceId);
    if (entry && entry.dayStart === dayStart) entry.count += 1;
    else this.#devices.set(deviceId, { dayStart, count: 1 });
    this.#maybeSweep(dayStart);
  }

  /** Requests seen today from a device id (for tests and abuse reports). */
  deviceCount(deviceId: string): number {
    const entry = this.#devices.get(deviceId);
    return entry && entry.dayStart === windowsAt(this.#now()).dayStart ? entry.count : 0;
  }

  async close(): Promise<void> {
    this.#counters.clear();
    this.#devices.clear();
    this.#charges.clear();
    this.#history.clear();
  }

  #current(subject: string, minuteStart: number, dayStart: number): Counters {
    const prev = this.#counters.get(subject);
    if (!prev || prev.dayStart !== dayStart) return { minuteStart, minuteCount: 0, dayStart, dayCount: 0 };
    if (prev.minuteStart !== minuteStart)
      return { minuteStart, minuteCount: 0, dayStart, dayCount: prev.dayCount };
    return prev;
  }

  #maybeSweep(dayStart: number): void {
    this.#writes += 1;
    if (this.#writes % SWEEP_EVERY !== 0) return;
    for (const [key, c] of this.#counters) if (c.dayStart !== dayStart) this.#counters.delete(key);
    for (const [key, d] of this.#devices) if (d.dayStart !== dayStart) this.#devices.delete(key);
    const oldestDay = dayStart - HISTORY_DAYS * DAY_MS;
    for (const [subject, byDay] of this.#history) {
      for (const day of byDay.keys()) if (day < oldestDay) byDay.delete(day);
      if (byDay.size === 0) this.#history.delete(subject);
    }
    const oldest = this.#now() - CHARGE_TTL_MS;
    for (const [id, charge] of this.#charges) if (charge.at < oldest) this.#charges.delete(id);
  }
}
