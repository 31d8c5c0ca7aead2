// The quota service as it runs in the cluster: 4 real quota processes (services/quota/server.ts)
// sharing one real redis-server, called over HTTP the way Envoy's ext_authz calls them.
// Exactness: 500 concurrent requests for one account admit exactly the limit.
// Fault: Redis killed mid-run → every answer is 503/5001, without waiting on Redis; Redis back → service back.

import { afterAll, beforeAll, expect, it } from 'vitest';
import type { AccountTier } from '../services/quota/accounts/account-store.ts';
import { RedisAccountStore } from '../services/quota/stores/redis-account-store.ts';
import { connectRedis, type RedisClient, redisReady } from '../services/quota/stores/redis-connection.ts';
import { startQuotaServer } from './support/quota-process.ts';
import { RedisServer } from './support/redis-server.ts';
import type { ServerProcess } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';
import { inOneMinute } from './support/window-log.ts';

const PREFIX = 'mp:';
const FREE_PER_DAY = 137;
const PRO_PER_MINUTE = 61;

let redis: RedisServer;
let processes: ServerProcess[] = [];
let accounts: RedisAccountStore | undefined;

const LIMITS = {
  FREE_PER_DAY: String(FREE_PER_DAY),
  FREE_PER_MINUTE: String(FREE_PER_DAY),
  PRO_PER_MINUTE: String(PRO_PER_MINUTE),
  PRO_PER_DAY: '100000',
  ANON_PER_MINUTE: '100000',
  ANON_PER_DAY: '100000',
};

async function startAll(count: number, env: Record<string, string>): Promise<void> {
  redis = await RedisServer.start();
  // Each server binds port 0 and reports its port; one that fails to start stops its own process
  // group, and the ones that did start are stopped here before the error is raised.
  const started = await Promise.allSettled(
    Array.from({ length: count }, () =>
      startQuotaServer({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: PREFIX, ...LIMITS, ...env }),
    ),
  );
  processes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await stopAll();
    throw failed.reason;
  }
  accounts = await openAccounts();
}

async function stopAll(): Promise<void> {
  await accounts?.close();
  accounts = undefined;
  await Promise.all(processes.map((p) => p.stop()));
  processes = [];
  await redis?.stop();
}

function connection(): RedisClient {
  return connectRedis({
    target: redis.url,
    commandTimeoutMs: 1000,
    socketTimeoutMs: 2000,
    connectTimeoutMs: 1000,
  });
}

async function openAccounts(): Promise<RedisAccountStore> {
  const conn = connection();
  await redisReady(conn, 5000);
  return new RedisAccountStore(conn, PREFIX);
}

async function newKey(tier: AccountTier): Promise<string> {
  if (!accounts) throw new Error('not started');
  const account = await accounts.createAccount({
    email: `${tier}-${Date.now()}-${Math.random()}@example.com`,
    tier,
  });
  const key = await accounts.createKey(account.id);
  return key?.secret as string;
}

interface Answer {
  status: number;
  code: number | undefined;
  ms: number;
  headers: Headers;
}

async function call(i: number, path: string, headers: Record<string, string>): Promise<Answer> {
  const target = processes[i % processes.length] as ServerProcess;
  const started = performance.now();
  const res = await fetch(`${target.url}/ext_authz${path}`, { method: 'POST', headers });
  const text = await res.text();
  const ms = performance.now() - started;
  const code = text ? (JSON.parse(text) as { code: number }).code : undefined;
  return { status: res.status, code, ms, headers: res.headers };
}

describeWithTool(REDIS_SERVER, '4 quota processes sharing one Redis: exactness', () => {
  // Exactness, not latency, is under test here: a generous command timeout keeps a loaded CI machine
  // from turning slow answers into (correct, but off-topic) 503s. The fault suite below uses defaults.
  beforeAll(() => startAll(4, { REDIS_COMMAND_TIMEOUT_MS: '2000' }));
  afterAll(stopAll);

  it('admits exactly the daily limit of 500 concurrent requests for one account (4291 for the rest)', async () => {
    const secret = await newKey('free');
    const answers = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        call(i, '/api/open/detect', { authorization: `Bearer ${secret}` }),
      ),
    );
    const admitted = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429 && a.code === 4291);
    expect(admitted).toHaveLength(FREE_PER_DAY);
    expect(refused).toHaveLength(500 - FREE_PER_DAY);
    // Every admitted request saw a distinct remaining count: no two were given the same slot.
    const remaining = new Set(admitted.map((a) => a.headers.get('x-ratelimit-remaining')));
    expect(remaining.size).toBe(FREE_PER_DAY);
    expect(refused.every((a) => a.headers.get('retry-after') !== null)).toBe(true);
  });

  it('admits exactly the minute limit of 500 concurrent requests for one pro account (4290 for the rest)', async () => {
    // The 500 are counted in one minute window: a burst that crossed a minute's edge is run again.
    const answers = await inOneMinute(async () => {
      const secret = await newKey('pro');
      return Promise.all(
        Array.from({ length: 500 }, (_, i) =>
          call(i, '/api/open/detect', { authorization: `Bearer ${secret}` }),
        ),
      );
    });
    expect(answers.filter((a) => a.status === 200)).toHaveLength(PRO_PER_MINUTE);
    expect(answers.filter((a) => a.status === 429 && a.code === 4290)).toHaveLength(500 - PRO_PER_MINUTE);
  });
});

describeWithTool(REDIS_SERVER, 'quota processes when Redis fails (default timeouts)', () => {
  // Default Redis timeouts; limits high enough that only the outage can refuse.
  beforeAll(() => startAll(2, { PRO_PER_MINUTE: '100000' }));
  afterAll(stopAll);

  /** Runs continuous load from 16 clients across the processes; returns the answers to requests sent
   * after `fault` completed and before the load stopped. */
  async function underLoad(fault: () => Promise<void> | void, secret: string): Promise<Answer[]> {
    const paths: Array<[string, Record<string, string>]> = [
      ['/api/open/detect', { authorization: `Bearer ${secret}` }],
      ['/api/public/detect', {}],
    ];
    let faulted = false;
    let running = true;
    const during: Answer[] = [];
    const worker = async (w: number) => {
      for (let i = w; running; i += 16) {
        const [path, headers] = paths[i % 2] as [string, Record<string, string>];
        const sentAfterFault = faulted;
        const answer = await call(i, path, headers);
        if (sentAfterFault) during.push(answer);
      }
    };
    const workers = Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
    await new Promise((r) => setTimeout(r, 300));
    await fault();
    faulted = true;
    await new Promise((r) => setTimeout(r, 1500));
    running = false;
    await workers;
    return during;
  }

  function expectAllUnavailableQuickly(during: Answer[]): void {
    // Quickly, by count: 16 clients in the 1.5 s after the fault get more than 50 answers only if the
    // answers do not wait on Redis (the command timeout is 100 ms). The latencies are printed, not judged.
    expect(during.length).toBeGreaterThan(50);
    const wrong = during.filter((a) => a.status !== 503 || a.code !== 5001);
    expect(wrong).toEqual([]);
    const ms = during.map((a) => a.ms).sort((x, y) => x - y);
    console.log(
      `${during.length} answers during the fault: p50 ${ms[Math.floor(ms.length / 2)]?.toFixed(1)} ms, max ${ms.at(-1)?.toFixed(1)} ms`,
    );
    expect(during.every((a) => Number(a.headers.get('retry-after')) >= 1)).toBe(true);
  }

  async function expectRecovery(secret: string): Promise<void> {
    const deadline = Date.now() + 10_000;
    const back = new Set<number>();
    while (back.size < processes.length && Date.now() < deadline) {
      for (let i = 0; i < processes.length; i++) {
        const answer = await call(i, '/api/open/detect', { authorization: `Bearer ${secret}` });
        if (answer.status === 200) back.add(i);
      }
      if (back.size < processes.length) await new Promise((r) => setTimeout(r, 100));
    }
    expect(back.size).toBe(processes.length);
  }

  it('answers 503/5001 without waiting while Redis is killed, never an allow, and recovers by itself', async () => {
    const during = await underLoad(() => redis.kill(), await newKey('pro'));
    expectAllUnavailableQuickly(during);

    // Redis comes back (empty: no persistence in this test): the processes reconnect on their own.
    await redis.restart();
    await accounts?.close();
    accounts = await openAccounts();
    await expectRecovery(await newKey('free'));
  });

  it('answers 503/5001 within the command timeout while Redis hangs (SIGSTOP), and recovers when it resumes', async () => {
    const secret = await newKey('pro');
    try {
      expectAllUnavailableQuickly(await underLoad(() => redis.pause(), secret));
    } finally {
      redis.resume();
    }
    await expectRecovery(await newKey('free'));
  });
});
