// The windows of the key path (a key resolved to its account, the account's tier limits counted), on a
// clock the test sets: run against the generic KeyQuota over the memory stores and RedisKeyQuota in
// each Redis topology (its own Lua scripts), so both are held to the same cases. Expected values are
// written out by hand from the fixed instants below.

import { expect, it } from 'vitest';
import type { AccountStore } from '../accounts/account-store.ts';
import type { KeyQuota } from '../authorize.ts';
import { testClock } from './quota-store.contract.ts';

export interface KeyQuotaContractTarget {
  /** A KeyQuota over fresh, empty stores on the clock `now`, and the account store it resolves keys in. */
  open(now: () => number): Promise<{ keys: KeyQuota; accounts: AccountStore }>;
}

// Instants in the future of any real clock (a Redis key expires at its window's end).
// 2031-03-14T10:00:30Z: half way through a minute.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);
const T0_MINUTE_END_S = 1_931_248_860; // 2031-03-14T10:01:00Z
const MIDNIGHT = Date.UTC(2031, 2, 15); // 2031-03-15T00:00:00Z
const MIDNIGHT_S = 1_931_299_200;
const NEXT_MIDNIGHT_S = 1_931_385_600; // 2031-03-16T00:00:00Z

const TIERS = { free: { perMinute: 2, perDay: 100 }, pro: { perMinute: 100, perDay: 2 } };

let accounts = 0;

export function keyQuotaContract(target: KeyQuotaContractTarget): void {
  async function keyOf(store: AccountStore, tier: 'free' | 'pro'): Promise<string> {
    const account = await store.createAccount({ email: `kq${++accounts}@example.com`, tier });
    const key = await store.createKey(account.id);
    if (!key) throw new Error('key not created');
    return key.secret;
  }

  it("counts a key's requests in its account's UTC minute, looks at it without counting, and starts again at the next minute", async () => {
    const clock = testClock(T0);
    const { keys, accounts: store } = await target.open(clock.now);
    const secret = await keyOf(store, 'free');
    for (let i = 1; i <= 2; i++) {
      const out = (await keys.consumeForKey(secret, TIERS))?.outcome;
      expect(out).toEqual({
        allowed: true,
        minute: { used: i, limit: 2, resetAt: T0_MINUTE_END_S },
        day: { used: i, limit: 100, resetAt: MIDNIGHT_S },
      });
    }
    const full = {
      allowed: false,
      refusedBy: 'minute',
      retryAfterSeconds: 30,
      minute: { used: 2, limit: 2, resetAt: T0_MINUTE_END_S },
      day: { used: 2, limit: 100, resetAt: MIDNIGHT_S },
    };
    expect((await keys.peekForKey(secret, TIERS))?.outcome).toEqual(full);
    expect((await keys.consumeForKey(secret, TIERS))?.outcome).toEqual(full);
    clock.advance(20_000); // 10:00:50Z: ten seconds left
    expect((await keys.peekForKey(secret, TIERS))?.outcome).toMatchObject({ retryAfterSeconds: 10 });
    clock.advance(10_000); // 10:01:00Z
    expect((await keys.consumeForKey(secret, TIERS))?.outcome).toEqual({
      allowed: true,
      minute: { used: 1, limit: 2, resetAt: T0_MINUTE_END_S + 60 },
      day: { used: 3, limit: 100, resetAt: MIDNIGHT_S },
    });
  });

  it("ends an account's day at UTC midnight, for every key of the account", async () => {
    const clock = testClock(MIDNIGHT - 1_500); // 23:59:58.5Z
    const { keys, accounts: store } = await target.open(clock.now);
    const secret = await keyOf(store, 'pro');
    const resolved = await store.resolveKey(secret);
    const other = (await store.createKey(resolved?.account.id ?? ''))?.secret ?? '';
    expect((await keys.consumeForKey(secret, TIERS))?.outcome.allowed).toBe(true);
    expect((await keys.consumeForKey(other, TIERS))?.outcome.allowed).toBe(true);
    expect((await keys.consumeForKey(other, TIERS))?.outcome).toEqual({
      allowed: false,
      refusedBy: 'day',
      retryAfterSeconds: 2,
      minute: { used: 2, limit: 100, resetAt: MIDNIGHT_S },
      day: { used: 2, limit: 2, resetAt: MIDNIGHT_S },
    });
    clock.set(MIDNIGHT);
    expect((await keys.consumeForKey(secret, TIERS))?.outcome).toEqual({
      allowed: true,
      minute: { used: 1, limit: 100, resetAt: MIDNIGHT_S + 60 },
      day: { used: 1, limit: 2, resetAt: NEXT_MIDNIGHT_S },
    });
  });
}
