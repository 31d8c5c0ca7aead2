import { describe, expect, it } from 'vitest';
import { MemoryQuotaStore } from './memory-quota-store.ts';

const limits = { perMinute: 3, perDay: 5 };
// 2026-11-21T10:00:30Z: half way through a minute.
const T0 = Date.UTC(2026, 10, 21, 10, 0, 30);

function clock(start: number) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms), set: (ms: number) => (now = ms) };
}

describe('MemoryQuotaStore', () => {
  it('admits up to the minute limit, then refuses with the seconds left in the minute', async () => {
    const c = clock(T0);
    const store = new MemoryQuotaStore(c.now);
    for (let i = 1; i <= 3; i++) {
      const out = await store.consume('ip:a', limits);
      expect(out.allowed).toBe(true);
      expect(out.minute.used).toBe(i);
    }
    const refused = await store.consume('ip:a', limits);
    expect(refused).toMatchObject({ allowed: false, refusedBy: 'minute', retryAfterSeconds: 30 });
  });

  it('does not count a request refused by the minute limit against the day', async () => {
    const c = clock(T0);
    const store = new MemoryQuotaStore(c.now);
    for (let i = 0; i < 3; i++) await store.consume('ip:a', limits);
    for (let i = 0; i < 10; i++) expect((await store.consume('ip:a', limits)).allowed).toBe(false);
    expect((await store.peek('ip:a', limits)).day.used).toBe(3);
    c.advance(60_000);
    expect((await store.consume('ip:a', limits)).allowed).toBe(true);
    expect((await store.peek('ip:a', limits)).day.used).toBe(4);
  });

  it('refuses by the day until UTC midnight, and the day wins when both are full', async () => {
    const c = clock(T0);
    const store = new MemoryQuotaStore(c.now);
    const day = { perMinute: 10, perDay: 2 };
    await store.consume('ip:a', day);
    await store.consume('ip:a', day);
    const refused = await store.consume('ip:a', day);
    const midnight = Date.UTC(2026, 10, 22);
    expect(refused).toMatchObject({ allowed: false, refusedBy: 'day' });
    if (refused.allowed) throw new Error('unreachable');
    expect(refused.retryAfterSeconds).toBe(Math.ceil((midnight - T0) / 1000));
    expect(refused.day.resetAt).toBe(midnight / 1000);
    c.set(midnight);
    expect((await store.consume('ip:a', day)).allowed).toBe(true);
  });

  it('aligns windows to the UTC minute, not to the first request', async () => {
    const c = clock(Date.UTC(2026, 10, 21, 10, 0, 59, 500));
    const store = new MemoryQuotaStore(c.now);
    for (let i = 0; i < 3; i++) await store.consume('ip:a', limits);
    const refused = await store.consume('ip:a', limits);
    expect(refused).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    c.advance(500);
    expect((await store.consume('ip:a', limits)).allowed).toBe(true);
  });

  it('keeps subjects apart and counts devices per day', async () => {
    const store = new MemoryQuotaStore(() => T0);
    for (let i = 0; i < 3; i++) await store.consume('ip:a', limits);
    expect((await store.consume('ip:b', limits)).allowed).toBe(true);
    await store.trackDevice('d1');
    await store.trackDevice('d1');
    expect(store.deviceCount('d1')).toBe(2);
    expect(store.deviceCount('d2')).toBe(0);
  });

  it('refunds a counted request once, only in the windows it was counted in', async () => {
    const c = clock(T0);
    const store = new MemoryQuotaStore(c.now);
    await store.consume('ip:a', limits, 'r1');
    await store.consume('ip:a', limits, 'r2');
    await store.refund('r1');
    await store.refund('r1'); // idempotent
    expect((await store.peek('ip:a', limits)).minute.used).toBe(1);
    expect((await store.peek('ip:a', limits)).day.used).toBe(1);
    // Refunded after the minute rolled over: the new minute keeps its count, the day gives one back.
    await store.consume('ip:a', limits, 'r3');
    c.advance(60_000);
    await store.consume('ip:a', limits, 'r4');
    await store.refund('r3');
    const after = await store.peek('ip:a', limits);
    expect(after.minute.used).toBe(1);
    expect(after.day.used).toBe(2);
  });

  it('cancels a consume whose refund came first, and never reuses a request id', async () => {
    const store = new MemoryQuotaStore(() => T0);
    await store.refund('early');
    await expect(store.consume('ip:a', limits, 'early')).rejects.toThrow(/already/);
    expect((await store.peek('ip:a', limits)).day.used).toBe(0);
    await store.consume('ip:a', limits, 'once');
    await expect(store.consume('ip:a', limits, 'once')).rejects.toThrow(/already/);
    expect((await store.peek('ip:a', limits)).day.used).toBe(1);
  });

  it('keeps per-day served/refused history for the subjects given, refund-aware', async () => {
    const c = clock(T0);
    const store = new MemoryQuotaStore(c.now);
    const history = ['acct:a', 'key:k'];
    for (let i = 0; i < 4; i++) await store.consume('acct:a', limits, `r${i}`, history); // 3 served, 1 refused
    await store.refund('r1');
    await store.refund('r1');
    c.advance(86_400_000); // the next day: yesterday's counts stay, today starts at zero
    await store.consume('acct:a', limits, 'next', history);
    for (const subject of history) {
      const days = await store.history(subject, 30);
      expect(days).toHaveLength(30);
      expect(days.slice(-2)).toEqual([
        { day: '2026-11-21', served: 2, refused: 1 },
        { day: '2026-11-22', served: 1, refused: 0 },
      ]);
    }
    expect((await store.history('acct:other', 30)).every((d) => d.served === 0 && d.refused === 0)).toBe(
      true,
    );
  });
});
