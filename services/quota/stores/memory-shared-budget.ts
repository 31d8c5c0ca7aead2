// Shared budgets (shared-budget.ts) in the process's memory, for the embedded default. One callback
// runs at a time, so the check and both counts are one atomic step. A budget keeps today's members
// only (at most its day total of them have a count), so distinct networks cannot grow it without bound.

import type { WindowLimits } from '../../../lib/policy/rules.ts';
import { windowsAt } from '../quota-store.ts';
import {
  type ShareCharge,
  type SharedBudgetStore,
  type ShareOutcome,
  shareDecision,
} from '../shared-budget.ts';

interface Windows {
  minuteStart: number;
  minute: number;
  dayStart: number;
  day: number;
}

interface Budget {
  total: Windows;
  members: Map<string, Windows>;
}

export class MemorySharedBudget implements SharedBudgetStore {
  readonly #budgets = new Map<string, Budget>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  async consumeShare(
    budget: string,
    member: string,
    total: WindowLimits,
    sharePercent: number,
  ): Promise<ShareOutcome> {
    const nowMs = this.#now();
    const { minuteStart, dayStart } = windowsAt(nowMs);
    const b = this.#current(budget, dayStart);
    const t = current(b.total, minuteStart, dayStart);
    const m = current(b.members.get(member), minuteStart, dayStart);
    const { allowed, outcome } = shareDecision(
      { totalMinute: t.minute, totalDay: t.day, memberMinute: m.minute, memberDay: m.day },
      total,
      sharePercent,
      nowMs,
    );
    if (!allowed) return outcome;
    for (const w of [t, m]) {
      w.minute += 1;
      w.day += 1;
    }
    b.total = t;
    b.members.set(member, m);
    return { ...outcome, charge: { budget, member, minuteStart, dayStart } };
  }

  async refundShare(charge: ShareCharge): Promise<void> {
    const b = this.#budgets.get(charge.budget);
    if (!b) return;
    for (const w of [b.total, b.members.get(charge.member)]) {
      if (!w) continue;
      if (w.minuteStart === charge.minuteStart && w.minute > 0) w.minute -= 1;
      if (w.dayStart === charge.dayStart && w.day > 0) w.day -= 1;
    }
  }

  #current(budget: string, dayStart: number): Budget {
    const b = this.#budgets.get(budget);
    if (b && b.total.dayStart === dayStart) return b;
    const fresh = { total: { minuteStart: 0, minute: 0, dayStart, day: 0 }, members: new Map() };
    this.#budgets.set(budget, fresh);
    return fresh;
  }
}

/** A member's or the total's counts in the current windows (a past window reads as zero). */
function current(w: Windows | undefined, minuteStart: number, dayStart: number): Windows {
  if (!w || w.dayStart !== dayStart) return { minuteStart, minute: 0, dayStart, day: 0 };
  if (w.minuteStart !== minuteStart) return { minuteStart, minute: 0, dayStart, day: w.day };
  return w;
}
