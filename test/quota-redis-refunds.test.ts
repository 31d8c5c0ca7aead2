// "A failed request is not charged", in Redis mode, under load: 2 real quota processes
// (services/quota/server.ts) on one real redis-server, with a command timeout so small that many
// counting scripts run in Redis after their caller has given up and answered 503. Every such 503 is
// refunded: once the processes have stopped, the counters in Redis equal the 200 answers, exactly —
// on the anonymous path (RedisQuotaStore) and on the key path (RedisKeyQuota's one script).

import { afterAll, beforeAll, expect, it } from 'vitest';
import { accountSubject } from '../services/quota/authorize.ts';
import { RedisAccountStore } from '../services/quota/stores/redis-account-store.ts';
import { connectRedis, redisReady } from '../services/quota/stores/redis-connection.ts';
import { RedisQuotaStore } from '../services/quota/stores/redis-quota-store.ts';
import { startQuotaServer } from './support/quota-process.ts';
import { RedisServer } from './support/redis-server.ts';
import type { ServerProcess } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';

const PREFIX = 'refund:';
const HIGH = '1000000';
const LIMITS = { perMinute: Number(HIGH), perDay: Number(HIGH) };

let redis: RedisServer | undefined;
let processes: ServerProcess[] = [];

function connection() {
  return connectRedis({
    url: redis?.url as string,
    commandTimeoutMs: 2000,
    socketTimeoutMs: 4000,
    connectTimeoutMs: 2000,
  });
}

describeWithTool(
  REDIS_SERVER,
  '2 quota processes, one Redis, a 3 ms command timeout: no 503 is charged',
  () => {
    beforeAll(async () => {
      redis = await RedisServer.start();
      processes = await Promise.all(
        [0, 1].map(() =>
          startQuotaServer({
            REDIS_URL: redis?.url as string,
            REDIS_KEY_PREFIX: PREFIX,
            REDIS_COMMAND_TIMEOUT_MS: '3',
            ANON_PER_MINUTE: HIGH,
            ANON_PER_DAY: HIGH,
            PRO_PER_MINUTE: HIGH,
            PRO_PER_DAY: HIGH,
            LOG_LEVEL: 'fatal',
          }),
        ),
      );
    });

    afterAll(async () => {
      await Promise.all(processes.map((p) => p.stop()));
      await redis?.stop();
    });

    it('counts exactly the requests answered 200, on the anonymous and the key path', async () => {
      const accountsConnection = connection();
      await redisReady(accountsConnection, 5000);
      const accounts = new RedisAccountStore(accountsConnection, PREFIX);
      const account = await accounts.createAccount({ email: 'refunds@example.com', tier: 'pro' });
      const secret = (await accounts.createKey(account.id))?.secret as string;
      await accounts.close();

      const tally = { public: new Map<string, number>(), open: new Map<string, number>() };
      const call = async (i: number) => {
        const endpoint = i % 2 === 0 ? 'public' : 'open';
        const target = processes[(i >> 1) % processes.length] as ServerProcess;
        const res = await fetch(`${target.url}/ext_authz/api/${endpoint}/detect`, {
          method: 'POST',
          headers: endpoint === 'open' ? { authorization: `Bearer ${secret}` } : {},
        });
        const text = await res.text();
        const code = text ? (JSON.parse(text) as { code: number }).code : 0;
        const key = `${res.status}/${code}`;
        tally[endpoint].set(key, (tally[endpoint].get(key) ?? 0) + 1);
      };
      // 32 clients, 1600 requests, both processes, both paths.
      let next = 0;
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          while (next < 1600) await call(next++);
        }),
      );
      // Stopping a process waits for the refunds it is still trying (RedisQuotaStore.close).
      const exits = await Promise.all(processes.map((p) => p.stop()));
      expect(exits).toEqual([0, 0]);

      const reader = connection();
      await redisReady(reader, 5000);
      const store = new RedisQuotaStore(reader, PREFIX);
      const anonymous = (await store.peek('anon:ip:127.0.0.1', LIMITS)).day.used;
      const keyed = (await store.peek(accountSubject(account.id), LIMITS)).day.used;
      await store.close();

      console.log('answers:', JSON.stringify({ public: [...tally.public], open: [...tally.open] }));
      console.log('counted in Redis:', JSON.stringify({ anonymous, keyed }));
      for (const answers of [tally.public, tally.open]) {
        // Only two answers exist here: allowed, or 503/5001 because the store did not answer in time.
        expect([...answers.keys()].sort()).toEqual(['200/0', '503/5001'].filter((k) => answers.has(k)));
      }
      // The test means something only if timeouts happened on both paths.
      expect(tally.public.get('503/5001') ?? 0).toBeGreaterThan(0);
      expect(tally.open.get('503/5001') ?? 0).toBeGreaterThan(0);
      expect(anonymous).toBe(tally.public.get('200/0') ?? 0);
      expect(keyed).toBe(tally.open.get('200/0') ?? 0);
    });
  },
);
