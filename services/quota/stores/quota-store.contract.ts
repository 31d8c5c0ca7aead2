// The windows every QuotaStore must keep, on a clock the test sets: run against the memory store (the
// TypeScript windows) and the Redis store in each topology (the Lua windows), so both are held to the
// same cases. Every expected value is written out by hand from the fixed instants below.

import { expect, it } from 'vitest';
import type { QuotaOutcome, QuotaStore } from '../quota-store.ts';

export interface ContractStore extends QuotaStore {
  deviceCount(deviceId: string): number | Promise<number>;
}

export interface TestClock {
  now: () => number;
  set(ms: number): void;
  advance(ms: number): void;
}

export function testClock(start: number): TestClock {
  let now = start;
  return {
    now: () => now,
    set: (ms) => {
      now = ms;
    },
    advance: (ms) => {
      now += ms;
    },
  };
}

/**
 * `open(now)` gives a fresh, empty store on the clock `now`; `chargeIdFor` names the charge a refund
 * that comes before its consume must cancel (the store's own charge id for that request and subject).
 */
export interface QuotaContractTarget {
  open(now: () => number): Promise<ContractStore>;
  chargeIdFor(requestId: string, subject: string): string;
}

// Instants in the future of any real clock, so that a Redis key's expiry at its window's end is never
// already past. 2031-03-14T10:00:30Z: half way through a minute.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);
const T0_MINUTE_END_S = 1_931_248_860; // 2031-03-14T10:01:00Z
const MIDNIGHT = Date.UTC(2031, 2, 15); // 2031-03-15T00:00:00Z
const MIDNIGHT_S = 1_931_299_200;

type Refused = Extract<QuotaOutcome, { allowed: false }>;

export function quotaStoreContract(target: QuotaContractTarget): void {
  const limits = { perMinute: 3, perDay: 5 };

  it('admits up to the minute limit, then refuses with the seconds left in the UTC minute', async () => {
    const store = await target.open(() => T0);
    for (let i = 1; i <= 3; i++) {
      const out = await store.consume('s', limits);
      expect(out.allowed).toBe(true);
      expect(out.minute).toEqual({ used: i, limit: 3, resetAt: T0_MINUTE_END_S });
      expect(out.day).toEqual({ used: i, limit: 5, resetAt: MIDNIGHT_S });
    }
    expect(await store.consume('s', limits)).toEqual({
      allowed: false,
      refusedBy: 'minute',
      retryAfterSeconds: 30,
      minute: { used: 3, limit: 3, resetAt: T0_MINUTE_END_S },
      day: { used: 3, limit: 5, resetAt: MIDNIGHT_S },
    });
  });

  it('does not count a request refused by the minute limit against the day', async () => {
    const clock = testClock(T0);
    const store = await target.open(clock.now);
    for (let i = 0; i < 3; i++) await store.consume('s', limits);
    for (let i = 0; i < 10; i++) expect((await store.consume('s', limits)).allowed).toBe(false);
    expect((await store.peek('s', limits)).day.used).toBe(3);
    clock.advance(60_000);
    const next = await store.consume('s', limits);
    expect(next.allowed).toBe(true);
    expect(next.minute.used).toBe(1);
    expect(next.day.used).toBe(4);
  });

  it('refuses by the day until UTC midnight, counting neither window, and the day wins when both are full', async () => {
    const clock = testClock(T0);
    const store = await target.open(clock.now);
    const wide = { perMinute: 100, perDay: 2 };
    await store.consume('d', wide);
    await store.consume('d', wide);
    const refused = (await store.consume('d', wide)) as Refused;
    expect(refused).toMatchObject({ allowed: false, refusedBy: 'day', retryAfterSeconds: 50_370 });
    expect(refused.minute.used).toBe(2);
    expect(refused.day).toEqual({ used: 2, limit: 2, resetAt: MIDNIGHT_S });
    const peek = await store.peek('d', wide);
    expect(peek.minute.used).toBe(2);
    expect(peek.day.used).toBe(2);
    expect(await store.consume('d', { perMinute: 2, perDay: 2 })).toMatchObject({
      allowed: false,
      refusedBy: 'day',
      retryAfterSeconds: 50_370,
    });
    clock.set(MIDNIGHT - 1);
    expect(await store.consume('d', wide)).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    clock.set(MIDNIGHT);
    const after = await store.consume('d', wide);
    expect(after.allowed).toBe(true);
    expect(after.day).toEqual({ used: 1, limit: 2, resetAt: 1_931_385_600 }); // 2031-03-16T00:00:00Z
  });

  it('aligns the minute to the UTC clock, not to the first request', async () => {
    const clock = testClock(Date.UTC(2031, 2, 14, 10, 0, 59, 500));
    const store = await target.open(clock.now);
    for (let i = 0; i < 3; i++) await store.consume('s', limits);
    expect(await store.consume('s', limits)).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    clock.advance(500);
    const next = await store.consume('s', limits);
    expect(next.allowed).toBe(true);
    expect(next.minute).toEqual({ used: 1, limit: 3, resetAt: T0_MINUTE_END_S + 60 });
  });

  it('peeks without counting', async () => {
    const store = await target.open(() => T0);
    expect(await store.peek('p', limits)).toEqual({
      minute: { used: 0, limit: 3, resetAt: T0_MINUTE_END_S },
      day: { used: 0, limit: 5, resetAt: MIDNIGHT_S },
    });
    await store.consume('p', limits);
    expect((await store.peek('p', limits)).day.used).toBe(1);
    expect((await store.peek('p', limits)).day.used).toBe(1);
  });

  it('admits exactly the day limit among concurrent calls', async () => {
    const store = await target.open(() => T0);
    const big = { perMinute: 100_000, perDay: 150 };
    const outcomes = await Promise.all(Array.from({ length: 400 }, () => store.consume('c', big)));
    expect(outcomes.filter((o) => o.allowed)).toHaveLength(150);
    expect(outcomes.filter((o) => !o.allowed && o.refusedBy === 'day')).toHaveLength(250);
  });

  it('keeps subjects apart and counts devices per UTC day', async () => {
    const clock = testClock(T0);
    const store = await target.open(clock.now);
    for (let i = 0; i < 3; i++) await store.consume('ip:a', limits);
    expect((await store.consume('ip:a', limits)).allowed).toBe(false);
    expect((await store.consume('ip:b', limits)).allowed).toBe(true);
    await store.trackDevice('dev-1');
    await store.trackDevice('dev-1');
    expect(await store.deviceCount('dev-1')).toBe(2);
    expect(await store.deviceCount('dev-2')).toBe(0);
    clock.set(MIDNIGHT);
    expect(await store.deviceCount('dev-1')).toBe(0);
    await store.trackDevice('dev-1');
    expect(await store.deviceCount('dev-1')).toBe(1);
  });

  it('refunds a counted request once, only in the windows it was counted in', async () => {
    const clock = testClock(T0);
    const store = await target.open(clock.now);
    const big = { perMinute: 100, perDay: 100 };
    const r1 = await store.consume('r', big, 'r1');
    await store.consume('r', big, 'r2');
    await store.refund(r1.chargeId ?? 'r1');
    await store.refund(r1.chargeId ?? 'r1');
    expect(await store.peek('r', big)).toMatchObject({ minute: { used: 1 }, day: { used: 1 } });
    // Refunded after the minute rolled over: the new minute keeps its count, the day gives one back.
    const r3 = await store.consume('r', big, 'r3');
    clock.advance(60_000);
    await store.consume('r', big, 'r4');
    await store.refund(r3.chargeId ?? 'r3');
    expect(await store.peek('r', big)).toMatchObject({ minute: { used: 1 }, day: { used: 2 } });
  });

  it('cancels a consume whose refund came first, and never counts a request id twice', async () => {
    const store = await target.open(() => T0);
    await store.refund(target.chargeIdFor('early', 'r'));
    await expect(store.consume('r', limits, 'early')).rejects.toThrow(/already/);
    expect((await store.peek('r', limits)).day.used).toBe(0);
    await store.consume('r', limits, 'once');
    await expect(store.consume('r', limits, 'once')).rejects.toThrow(/already/);
    expect((await store.peek('r', limits)).day.used).toBe(1);
  });

  it('keeps per-day served/refused history for the subjects given, refund-aware', async () => {
    const clock = testClock(T0);
    const store = await target.open(clock.now);
    const history = ['acct:h', 'acct:h/key:k1'];
    const tight = { perMinute: 2, perDay: 100 };
    await store.consume('acct:h', tight, 'h-1', history);
    const second = await store.consume('acct:h', tight, 'h-2', history);
    await store.consume('acct:h', tight, 'h-3', history); // refused: the minute is full
    await store.consume('acct:h', tight); // refused too, but under no history subject
    await store.refund(second.chargeId ?? 'h-2');
    await store.refund(second.chargeId ?? 'h-2');
    clock.set(MIDNIGHT + 30_000); // the next day: yesterday's counts stay, today starts at zero
    await store.consume('acct:h', tight, 'next', history);
    for (const subject of history) {
      const days = await store.history(subject, 30);
      expect(days).toHaveLength(30);
      expect(days[0]?.day).toBe('2031-02-14');
      expect(days.slice(-2)).toEqual([
        { day: '2031-03-14', served: 1, refused: 1 },
        { day: '2031-03-15', served: 1, refused: 0 },
      ]);
      expect(days.slice(0, -2).every((d) => d.served === 0 && d.refused === 0)).toBe(true);
    }
    expect((await store.history('acct:other', 30)).every((d) => d.served === 0 && d.refused === 0)).toBe(
      true,
    );
  });
}
