// "A failed request is not charged", in Redis mode, under load: 2 real processes on one real
// redis-server, with a command timeout so small that many counting scripts run in Redis after their
// caller has given up and answered 503. Every such 503 is refunded: once the processes have stopped,
// the counters in Redis equal the 200 answers, exactly — on the anonymous path (RedisQuotaStore) and
// on the key path (RedisKeyQuota's one script); through the quota service's ext_authz endpoint, and
// through the embedded server's detect endpoints with the real model (where a 503 after counting is
// refunded as it is sent).

import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { accountSubject } from '../services/quota/authorize.ts';
import { RedisAccountStore } from '../services/quota/stores/redis-account-store.ts';
import { connectRedis, redisReady } from '../services/quota/stores/redis-connection.ts';
import { RedisQuotaStore } from '../services/quota/stores/redis-quota-store.ts';
import { fixture } from './fixtures/corpus.ts';
import { startQuotaServer } from './support/quota-process.ts';
import { RedisServer } from './support/redis-server.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';

const HIGH = '1000000';
const LIMITS = { perMinute: Number(HIGH), perDay: Number(HIGH) };

let redis: RedisServer | undefined;
let processes: ServerProcess[] = [];

function connection() {
  return connectRedis({
    target: redis?.url as string,
    commandTimeoutMs: 2000,
    socketTimeoutMs: 4000,
    connectTimeoutMs: 2000,
  });
}

function env(prefix: string): Record<string, string> {
  return {
    REDIS_URL: redis?.url as string,
    REDIS_KEY_PREFIX: prefix,
    REDIS_COMMAND_TIMEOUT_MS: '3',
    ANON_PER_MINUTE: HIGH,
    ANON_PER_DAY: HIGH,
    PRO_PER_MINUTE: HIGH,
    PRO_PER_DAY: HIGH,
    LOG_LEVEL: 'fatal',
  };
}

async function proKey(prefix: string): Promise<{ id: string; secret: string }> {
  const conn = connection();
  await redisReady(conn, 5000);
  const accounts = new RedisAccountStore(conn, prefix);
  const account = await accounts.createAccount({ email: 'refunds@example.com', tier: 'pro' });
  const secret = (await accounts.createKey(account.id))?.secret as string;
  await accounts.close();
  return { id: account.id, secret };
}

interface Tally {
  public: Map<string, number>;
  open: Map<string, number>;
}

/** 32 clients send `total` requests over both processes, alternating the two endpoints. */
async function load(
  total: number,
  send: (target: ServerProcess, endpoint: 'public' | 'open') => Promise<Response>,
): Promise<Tally> {
  const tally: Tally = { public: new Map(), open: new Map() };
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < total) {
        const i = next++;
        const endpoint = i % 2 === 0 ? 'public' : 'open';
        const res = await send(processes[(i >> 1) % processes.length] as ServerProcess, endpoint);
        const text = await res.text();
        const code = text ? (JSON.parse(text) as { code: number }).code : 0;
        const key = `${res.status}/${code}`;
        tally[endpoint].set(key, (tally[endpoint].get(key) ?? 0) + 1);
      }
    }),
  );
  return tally;
}

/** Stops the processes (each waits for the refunds it is still trying), then compares Redis with the answers. */
async function expectCountsEqualAnswers(tally: Tally, prefix: string, accountId: string, label: string) {
  const exits = await Promise.all(processes.map((p) => p.stop()));
  expect(exits).toEqual([0, 0]);
  const reader = connection();
  await redisReady(reader, 5000);
  const store = new RedisQuotaStore(reader, prefix);
  const anonymous = (await store.peek('anon:ip:127.0.0.1', LIMITS)).day.used;
  const keyed = (await store.peek(accountSubject(accountId), LIMITS)).day.used;
  await store.close();
  console.log(`${label} answers:`, JSON.stringify({ public: [...tally.public], open: [...tally.open] }));
  console.log(`${label} counted in Redis:`, JSON.stringify({ anonymous, keyed }));
  for (const answers of [tally.public, tally.open]) {
    // Only two answers exist here: allowed, or 503/5001 because the store did not answer in time.
    expect([...answers.keys()].sort()).toEqual(['200/0', '503/5001'].filter((k) => answers.has(k)));
  }
  // The test means something only if timeouts happened on both paths.
  expect(tally.public.get('503/5001') ?? 0).toBeGreaterThan(0);
  expect(tally.open.get('503/5001') ?? 0).toBeGreaterThan(0);
  expect(anonymous).toBe(tally.public.get('200/0') ?? 0);
  expect(keyed).toBe(tally.open.get('200/0') ?? 0);
}

describeWithTool(REDIS_SERVER, 'a 3 ms Redis command timeout under load: no 503 is charged', () => {
  beforeAll(async () => {
    redis = await RedisServer.start();
  });

  afterEach(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    processes = [];
  });

  afterAll(async () => {
    await redis?.stop();
  });

  it('2 quota processes (ext_authz): Redis counts exactly the requests answered 200, on both paths', async () => {
    const prefix = 'refund-authz:';
    processes = await Promise.all([0, 1].map(() => startQuotaServer(env(prefix))));
    const key = await proKey(prefix);
    const tally = await load(1600, (target, endpoint) =>
      fetch(`${target.url}/ext_authz/api/${endpoint}/detect`, {
        method: 'POST',
        headers: endpoint === 'open' ? { authorization: `Bearer ${key.secret}` } : {},
      }),
    );
    await expectCountsEqualAnswers(tally, prefix, key.id, 'ext_authz');
  });

  it('2 embedded servers (detect, real model): Redis counts exactly the images answered 200', async () => {
    const prefix = 'refund-detect:';
    processes = await Promise.all([0, 1].map(() => startServer(env(prefix))));
    const key = await proKey(prefix);
    const image = readFileSync(fixture('320x240.jpg'));
    const tally = await load(400, (target, endpoint) =>
      fetch(`${target.url}/api/${endpoint}/detect`, {
        method: 'POST',
        body: image,
        headers: {
          'content-type': 'image/jpeg',
          ...(endpoint === 'open' ? { authorization: `Bearer ${key.secret}` } : {}),
        },
      }),
    );
    await expectCountsEqualAnswers(tally, prefix, key.id, 'detect');
  });
});
