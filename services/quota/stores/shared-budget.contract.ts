// The shares every SharedBudgetStore must keep (shared-budget.ts), on a clock the test sets: run
// against the memory store and the Redis store in each topology, so the TypeScript and the Lua are
// held to the same cases. Every expected value is written out by hand.

import { expect, it } from 'vitest';
import { type SharedBudgetStore, shareLimits } from '../shared-budget.ts';
import { testClock } from './quota-store.contract.ts';

// 2031-03-14T10:00:30Z: half way through a minute, in the future of any real clock.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);

export function sharedBudgetContract(open: (now: () => number) => Promise<SharedBudgetStore>): void {
  it('shares: a percentage of each window, rounded down, at least one', () => {
    expect(shareLimits({ perMinute: 30, perDay: 1000 }, 10)).toEqual({ perMinute: 3, perDay: 100 });
    expect(shareLimits({ perMinute: 5, perDay: 19 }, 10)).toEqual({ perMinute: 1, perDay: 1 });
    expect(shareLimits({ perMinute: 30, perDay: 1000 }, 100)).toEqual({ perMinute: 30, perDay: 1000 });
    expect(shareLimits({ perMinute: 7, perDay: 99 }, 50)).toEqual({ perMinute: 3, perDay: 49 });
  });

  it('one member takes at most its share; another member still gets in', async () => {
    const store = await open(() => T0);
    const total = { perMinute: 30, perDay: 1000 };
    for (let i = 0; i < 3; i++)
      expect((await store.consumeShare('b', 'net-a', total, 10)).allowed).toBe(true);
    const refused = await store.consumeShare('b', 'net-a', total, 10);
    expect(refused).toMatchObject({
      allowed: false,
      refusedBy: 'minute',
      refusedByBound: 'share',
      retryAfterSeconds: 30,
    });
    const other = await store.consumeShare('b', 'net-b', total, 10);
    expect(other.allowed).toBe(true);
    expect(other.minute.used).toBe(1);
  });

  it('the total bounds every member together; a refused consume counts nowhere (both or neither)', async () => {
    const clock = testClock(T0);
    const store = await open(clock.now);
    const total = { perMinute: 4, perDay: 6 };
    for (const m of ['a', 'b', 'c', 'd'])
      expect((await store.consumeShare('b', m, total, 50)).allowed).toBe(true);
    // The minute is full: refused by the total, and member e's share is not spent by the refusal.
    expect(await store.consumeShare('b', 'e', total, 50)).toMatchObject({
      allowed: false,
      refusedBy: 'minute',
      refusedByBound: 'total',
    });
    clock.advance(60_000);
    // A new minute: e has its whole share (2 of 4); then the day's 6 are used up.
    expect((await store.consumeShare('b', 'e', total, 50)).allowed).toBe(true);
    expect((await store.consumeShare('b', 'e', total, 50)).allowed).toBe(true);
    expect(await store.consumeShare('b', 'f', total, 50)).toMatchObject({
      allowed: false,
      refusedBy: 'day',
      refusedByBound: 'total',
      retryAfterSeconds: 50_310, // 10:01:30Z → midnight
    });
  });

  it('a member at its day share is refused by the day until midnight', async () => {
    const clock = testClock(T0);
    const store = await open(clock.now);
    const total = { perMinute: 10, perDay: 10 };
    for (let i = 0; i < 3; i++) {
      expect((await store.consumeShare('b', 'a', total, 30)).allowed).toBe(true);
      clock.advance(60_000);
    }
    expect(await store.consumeShare('b', 'a', total, 30)).toMatchObject({
      allowed: false,
      refusedBy: 'day',
      refusedByBound: 'share',
    });
    clock.set(Date.UTC(2031, 2, 15, 0, 0, 1));
    expect((await store.consumeShare('b', 'a', total, 30)).allowed).toBe(true);
  });

  it('a refund gives back the total and the share, in the windows it was counted in only', async () => {
    const clock = testClock(T0);
    const store = await open(clock.now);
    const total = { perMinute: 2, perDay: 3 };
    const first = await store.consumeShare('b', 'a', total, 100);
    expect(first.charge).toBeDefined();
    await store.consumeShare('b', 'a', total, 100);
    expect((await store.consumeShare('b', 'z', total, 100)).allowed).toBe(false);
    await store.refundShare(first.charge as NonNullable<typeof first.charge>);
    const again = await store.consumeShare('b', 'z', total, 100);
    expect(again.allowed).toBe(true);
    // A charge of a past minute: the new minute is left alone, the day is given back.
    const old = again.charge as NonNullable<typeof again.charge>;
    clock.advance(60_000);
    expect((await store.consumeShare('b', 'a', total, 100)).allowed).toBe(true); // the day: 3 of 3
    expect(await store.consumeShare('b', 'a', total, 100)).toMatchObject({
      allowed: false,
      refusedBy: 'day',
    });
    await store.refundShare(old);
    const after = await store.consumeShare('b', 'a', total, 100);
    expect(after.allowed).toBe(true);
    expect(after.minute.used).toBe(2);
    expect(after.day.used).toBe(3);
  });

  it('budgets are apart from each other', async () => {
    const store = await open(() => T0);
    const total = { perMinute: 1, perDay: 1 };
    expect((await store.consumeShare('b1', 'a', total, 100)).allowed).toBe(true);
    expect((await store.consumeShare('b2', 'a', total, 100)).allowed).toBe(true);
    expect((await store.consumeShare('b1', 'a', total, 100)).allowed).toBe(false);
  });

  it('concurrent consumes from many members are admitted exactly up to the total', async () => {
    const store = await open(() => T0);
    const total = { perMinute: 25, perDay: 1000 };
    const outcomes = await Promise.all(
      Array.from({ length: 200 }, (_, i) => store.consumeShare('b', `m${i % 40}`, total, 10)),
    );
    expect(outcomes.filter((o) => o.allowed)).toHaveLength(25);
  });
}
