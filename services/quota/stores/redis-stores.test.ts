// The Redis stores against real servers in each topology (single redis-server; Sentinel: 1 primary,
// 2 replicas, 3 sentinels; Cluster: 3 primaries, 3 replicas): the account-store and the quota-store
// contracts (the Lua windows on the test's clock), what only Redis does (expiry at the window's end,
// Redis TIME, counting across connections), and the key path, each topology started once. On the single server also: timed-out counts, and behaviour
// while Redis is down or hung. Multi-process exactness
// and failover under load: test/quota-redis-processes.test.ts, test/quota-redis-failover.test.ts.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RedisServer } from '../../../test/support/redis-server.ts';
import { type RedisTopology, startTopology, TOPOLOGY_KINDS } from '../../../test/support/redis-topology.ts';
import { describeWithTool, REDIS_CLI, REDIS_SERVER } from '../../../test/support/tools.ts';
import { accountStoreContract } from './account-store.contract.ts';
import { keyQuotaContract } from './key-quota.contract.ts';
import { quotaStoreContract } from './quota-store.contract.ts';
import { RedisAccountStore } from './redis-account-store.ts';
import { connectRedis, NO_REPLICATION, type RedisClient, redisReady } from './redis-connection.ts';
import { RedisKeyQuota } from './redis-key-quota.ts';
import { chargeIdFor, chargeKeyOf, keySlot, RedisLayout } from './redis-layout.ts';
import { PendingCharges, RedisQuotaStore } from './redis-quota-store.ts';
import { sharedBudgetContract } from './shared-budget.contract.ts';

const open: Array<{ close(): Promise<void> }> = [];
let prefixes = 0;

for (const kind of TOPOLOGY_KINDS) {
  let topology: RedisTopology;

  function connection(commandTimeoutMs = 100): RedisClient {
    return connectRedis({
      target: topology.endpoint,
      commandTimeoutMs,
      socketTimeoutMs: 1000,
      connectTimeoutMs: 1000,
    });
  }

  // With replicas, account writes wait for one (as configured by default for Sentinel and Cluster).
  const replication = () => (kind === 'single' ? NO_REPLICATION : { replicas: 1, waitMs: 1000 });

  // Behaviour, not latency, is under test here: a generous command timeout keeps a loaded machine from
  // turning slow answers into (correct, but off-topic) timeouts. The fault test sets its own.
  async function accountStore(
    prefix = `a${++prefixes}:`,
  ): Promise<{ store: RedisAccountStore; redis: RedisClient }> {
    const redis = connection(2000);
    await redisReady(redis, 5000);
    const store = new RedisAccountStore(redis, prefix, replication());
    open.push(store);
    return { store, redis };
  }

  async function quotaStore(
    commandTimeoutMs = 2000,
    pending = new PendingCharges(),
    now?: () => number,
  ): Promise<{ store: RedisQuotaStore; redis: RedisClient; prefix: string; layout: RedisLayout }> {
    const redis = connection(commandTimeoutMs);
    await redisReady(redis, 5000);
    const prefix = `t${++prefixes}:`;
    const store = new RedisQuotaStore(redis, prefix, pending, now);
    open.push(store);
    return { store, redis, prefix, layout: new RedisLayout(prefix) };
  }

  describeWithTool([REDIS_SERVER, REDIS_CLI], `Redis stores (${kind}, real redis-server)`, () => {
    beforeAll(async () => {
      topology = await startTopology(kind);
    }, 60_000);
    afterEach(async () => {
      for (const s of open.splice(0)) await s.close();
    });
    afterAll(async () => {
      await topology?.stop();
    });

    describe('RedisAccountStore', () => {
      accountStoreContract(async () => (await accountStore()).store);
    });

    if (kind === 'cluster') {
      it('computes key slots as Redis does, and a charge id names its subject’s slot', async () => {
        const redis = connection(2000);
        await redisReady(redis, 5000);
        open.push({ close: async () => redis.disconnect() });
        const layout = new RedisLayout('p:');
        const node = (redis as import('ioredis').Cluster).nodes('master')[0];
        for (const key of ['foo', '{user1000}.following', 'héllo', '{}x', 'a{b', layout.day('anon:ip:::1')])
          expect(keySlot(key), key).toBe(Number(await node?.cluster('KEYSLOT', key)));
        const id = chargeIdFor('r-1', 'acct:acc_1');
        expect(keySlot(chargeKeyOf(layout, id))).toBe(keySlot(layout.minute('acct:acc_1')));
      });
    }

    describe('RedisQuotaStore', () => {
      quotaStoreContract({
        open: async (now) => (await quotaStore(2000, new PendingCharges(), now)).store,
        chargeIdFor,
      });

      describe('shared budgets', () => {
        sharedBudgetContract(async (now) => (await quotaStore(2000, new PendingCharges(), now)).store);
      });

      // 2031-03-14T10:00:30Z, on the store's clock: the keys expire at the ends of its windows.
      const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);

      it('sets each window key and the device counter to expire at its window’s end', async () => {
        const { store, redis, layout } = await quotaStore(2000, new PendingCharges(), () => T0);
        await store.consume('x', { perMinute: 3, perDay: 5 });
        await store.trackDevice('dev-1');
        expect(await redis.pexpiretime(layout.minute('x'))).toBe(1_931_248_860_000); // 10:01:00Z
        expect(await redis.pexpiretime(layout.day('x'))).toBe(1_931_299_200_000); // 2031-03-15T00:00Z
        expect(await redis.pexpiretime(layout.device('dev-1'))).toBe(1_931_299_200_000);
      });

      it('keeps a history hash for 31 days from the start of its last day', async () => {
        const { store, redis, layout } = await quotaStore(2000, new PendingCharges(), () => T0);
        await store.consume('acct:h', { perMinute: 3, perDay: 5 }, 'h-1', ['acct:h']);
        // 2031-03-14T00:00Z + 31 days = 2031-04-14T00:00Z
        expect(await redis.pexpiretime(layout.history('acct:h'))).toBe(1_933_891_200_000);
      });

      it('reads the windows from Redis TIME when given no clock', async () => {
        const { store } = await quotaStore();
        const before = Date.now();
        const out = await store.consume('s', { perMinute: 3, perDay: 5 });
        const after = Date.now();
        // Redis runs on this machine's clock: its window contains the instant of the call.
        expect(out.minute.resetAt % 60).toBe(0);
        expect(out.minute.resetAt * 1000).toBeGreaterThan(before);
        expect(out.minute.resetAt * 1000 - 60_000).toBeLessThanOrEqual(after);
      });

      it('admits exactly the limit among concurrent calls on separate connections', async () => {
        // Exactness is under test, not latency: a generous timeout keeps a loaded machine from failing it.
        const stores = await Promise.all([0, 1, 2, 3].map(() => quotaStore(2000)));
        const prefix = 'shared:';
        const shared = stores.map(({ redis }) => new RedisQuotaStore(redis, prefix));
        const big = { perMinute: 100_000, perDay: 150 };
        const outcomes = await Promise.all(
          Array.from({ length: 400 }, (_, i) => (shared[i % 4] as RedisQuotaStore).consume('c', big)),
        );
        expect(outcomes.filter((o) => o.allowed)).toHaveLength(150);
        expect(outcomes.filter((o) => !o.allowed && o.refusedBy === 'day')).toHaveLength(250);
      });
    });

    describe('RedisKeyQuota', () => {
      keyQuotaContract({
        open: async (now) => {
          const pending = new PendingCharges();
          const { redis, prefix } = await quotaStore(2000, pending, now);
          const { store: accounts } = await accountStore(prefix);
          return { keys: new RedisKeyQuota(redis, prefix, pending, now), accounts };
        },
      });

      const tiers = { free: { perMinute: 100, perDay: 2 }, pro: { perMinute: 100, perDay: 1000 } };
      // 2031-03-14T10:00:30Z, on the stores' clock.
      const now = () => Date.UTC(2031, 2, 14, 10, 0, 30);

      it('looks without counting, counts with a charge id, and the quota store refunds that charge', async () => {
        const pending = new PendingCharges();
        const { store, redis, prefix } = await quotaStore(2000, pending, now);
        const { store: accounts } = await accountStore(prefix);
        const account = await accounts.createAccount({ email: 'kq@example.com', tier: 'free' });
        const secret = (await accounts.createKey(account.id))?.secret as string;
        const keys = new RedisKeyQuota(redis, prefix, pending, now);
        const subject = `acct:${account.id}`;

        expect((await keys.peekForKey(secret, tiers))?.outcome.allowed).toBe(true);
        expect((await store.peek(subject, tiers.free)).day.used).toBe(0);
        expect((await keys.consumeForKey(secret, tiers, 'k1'))?.outcome.allowed).toBe(true);
        const k2 = (await keys.consumeForKey(secret, tiers, 'k2'))?.outcome;
        expect(k2?.allowed).toBe(true);
        // Full: the look says what counting would say (day refusal), and counts nothing.
        const look = await keys.peekForKey(secret, tiers);
        expect(look?.outcome).toMatchObject({ allowed: false, refusedBy: 'day' });
        expect((await store.peek(subject, tiers.free)).day.used).toBe(2);
        await store.refund(k2?.chargeId ?? 'k2');
        expect((await store.peek(subject, tiers.free)).day.used).toBe(1);
        expect((await keys.peekForKey(secret, tiers))?.outcome.allowed).toBe(true);
        // A refund that arrives before its script cancels it, on the key path too (the charge id is the
        // one the key path hands out: bare on one keyspace, naming the account's slot in a Cluster).
        await store.refund(kind === 'cluster' ? chargeIdFor('k3', subject) : 'k3');
        await expect(keys.consumeForKey(secret, tiers, 'k3')).rejects.toThrow(/already/);
        expect((await store.peek(subject, tiers.free)).day.used).toBe(1);
        expect(await keys.peekForKey(`nsk_live_${'c'.repeat(32)}`, tiers)).toBeUndefined();
      });
    });

    if (kind === 'single') {
      describe('only on one server', () => {
        it('keeps only hashes of keys and sessions in Redis', async () => {
          const { store, redis } = await accountStore('h:');
          const a = await store.createAccount({ email: 'h@example.com', tier: 'free' });
          const key = await store.createKey(a.id);
          const { token } = await store.createSession(a.id, 60_000);
          const dump: string[] = [];
          for (const k of await redis.keys('h:*')) {
            dump.push(k);
            const type = await redis.type(k);
            if (type === 'hash') dump.push(...Object.values(await redis.hgetall(k)));
            if (type === 'string') dump.push((await redis.get(k)) ?? '');
          }
          const all = dump.join('\n');
          expect(all).not.toContain(key?.secret as string);
          expect(all).not.toContain(token);
        });

        it('makes a timed-out count and its 503 agree: refunded calls leave exactly the answered ones counted', async () => {
          // A 1 ms command timeout on a process kept busy: many scripts run in Redis after their caller
          // gave up. Every call that failed is refunded; the counters must equal the successes.
          const redis = connection(1);
          await redisReady(redis, 5000);
          const pending = new PendingCharges();
          const store = new RedisQuotaStore(redis, 'to:', pending);
          // Refunds go through a connection that answers in time, as a later retry would.
          const refunder = connection(1000);
          await redisReady(refunder, 5000);
          const refunds = new RedisQuotaStore(refunder, 'to:', pending);
          open.push(refunds);
          const big = { perMinute: 100_000, perDay: 100_000 };
          let ok = 0;
          let failed = 0;
          for (let round = 0; round < 20; round++) {
            const calls = Array.from({ length: 50 }, (_, i) => {
              const id = `r${round}-${i}`;
              return store.consume('t', big, id).then(
                () => {
                  ok += 1;
                },
                () => {
                  failed += 1;
                  return refunds.refund(id);
                },
              );
            });
            const busyUntil = performance.now() + 3;
            while (performance.now() < busyUntil) {
              // keep the event loop busy, as a loaded process would
            }
            await Promise.all(calls);
          }
          await store.close();
          const reader = connection(1000);
          await redisReady(reader, 5000);
          const check = new RedisQuotaStore(reader, 'to:');
          open.push(check);
          expect(failed).toBeGreaterThan(0);
          expect((await check.peek('t', big)).day.used).toBe(ok);
        });
        describe('when Redis fails', () => {
          it('rejects at once while Redis is down, within the command timeout while it hangs, and recovers', async () => {
            const { store } = await quotaStore(100);
            const server = topology.nodes[0] as RedisServer;
            const big = { perMinute: 100_000, perDay: 100_000 };
            expect((await store.consume('f', big)).allowed).toBe(true);

            // Each call ends by a refusal of the closed connection or by the command timeout (100 ms
            // here), never by waiting on Redis: the reasons say which.
            const attempt = async () => {
              const result = await store.consume('f', big).then(
                () => 'ok',
                (err: Error) => err.message,
              );
              return { result };
            };

            await server.kill();
            const down = await Promise.all(Array.from({ length: 50 }, attempt));
            for (const r of down) {
              expect(r.result).toMatch(/isn't writeable|connection is closed|timed out/i);
            }

            await server.restart();
            const deadline = Date.now() + 5000;
            let recovered = false;
            while (!recovered && Date.now() < deadline) {
              recovered = (await attempt()).result === 'ok';
              if (!recovered) await new Promise((r) => setTimeout(r, 50));
            }
            expect(recovered).toBe(true);

            // Hung (SIGSTOP): the connection stays open but nothing answers.
            server.pause();
            try {
              const hung = await Promise.all(Array.from({ length: 50 }, attempt));
              for (const r of hung) expect(r.result).toMatch(/timed out|writeable|timeout/i);
            } finally {
              server.resume();
            }
            const deadline2 = Date.now() + 5000;
            recovered = false;
            while (!recovered && Date.now() < deadline2) {
              recovered = (await attempt()).result === 'ok';
              if (!recovered) await new Promise((r) => setTimeout(r, 50));
            }
            expect(recovered).toBe(true);
          });
        });
      });
    }
  });
}
