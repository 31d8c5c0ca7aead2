// The quota service on a replicated Redis, with real quota processes (services/quota/server.ts) called
// over HTTP the way Envoy's ext_authz calls them:
//   Cluster (3 primaries, 3 replicas): exactness over all shards with two processes (refunds
//     included); a slot migration (`redis-cli --cluster reshard`) under load; `kill -9` of the
//     primary holding a busy account, under load.
//   Sentinel (1 primary, 2 replicas, 3 sentinels): `kill -9` of the primary under load.
// Under a kill every answer must be 200, 429 or 503/5001, and what was acknowledged before it (accounts,
// keys, a revocation made just before) must be there after it. Each run prints its unavailability
// window (first to last 503) and the counts lost with the old primary (the most a failover over-admits).

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountSubject } from '../services/quota/authorize.ts';
import { REFUND_PATH_PREFIX } from '../services/quota/ext-authz.ts';
import { RedisAccountStore } from '../services/quota/stores/redis-account-store.ts';
import { connectRedis, type RedisClient, redisReady } from '../services/quota/stores/redis-connection.ts';
import { keySlot, RedisLayout } from '../services/quota/stores/redis-layout.ts';
import { RedisQuotaStore } from '../services/quota/stores/redis-quota-store.ts';
import { startQuotaServer } from './support/quota-process.ts';
import {
  ask,
  currentPrimary,
  nodeOn,
  type RedisTopology,
  startTopology,
  type TopologyKind,
  until,
} from './support/redis-topology.ts';
import type { ServerProcess } from './support/server-process.ts';
import { describeWithTool, REDIS_CLI, REDIS_SERVER, requireTool } from './support/tools.ts';

const execFileAsync = promisify(execFile);

const PREFIX = 'ha:';
const HIGH = '1000000';

interface Answer {
  status: number;
  code: number | undefined;
  chargeId: string | null;
  at: number;
}

interface Harness {
  topology: RedisTopology;
  processes: ServerProcess[];
  accounts: RedisAccountStore;
  quota: RedisQuotaStore;
  redis: RedisClient;
}

function harness(kind: TopologyKind, env: Record<string, string>): () => Harness {
  let h: Harness | undefined;
  beforeAll(async () => {
    const topology = await startTopology(kind);
    const processes: ServerProcess[] = [];
    try {
      const started = await Promise.allSettled(
        [0, 1].map(() => startQuotaServer({ ...topology.env, REDIS_KEY_PREFIX: PREFIX, ...env })),
      );
      for (const s of started) if (s.status === 'fulfilled') processes.push(s.value);
      const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
      const connection = () =>
        connectRedis({
          target: topology.endpoint,
          commandTimeoutMs: 2000,
          socketTimeoutMs: 3000,
          connectTimeoutMs: 1000,
        });
      const accountsRedis = connection();
      const redis = connection();
      await Promise.all([redisReady(accountsRedis, 10_000), redisReady(redis, 10_000)]);
      h = {
        topology,
        processes,
        accounts: new RedisAccountStore(accountsRedis, PREFIX, { replicas: 1, waitMs: 1000 }),
        quota: new RedisQuotaStore(redis, PREFIX),
        redis,
      };
    } catch (err) {
      await Promise.allSettled(processes.map((p) => p.stop()));
      await topology.stop();
      throw err;
    }
  }, 90_000);
  afterAll(async () => {
    if (!h) return;
    await Promise.allSettled([h.accounts.close(), h.quota.close()]);
    await Promise.allSettled(h.processes.map((p) => p.stop()));
    await h.topology.stop();
  });
  return () => {
    if (!h) throw new Error('not started');
    return h;
  };
}

async function call(h: Harness, i: number, secret: string | undefined): Promise<Answer> {
  const target = h.processes[i % h.processes.length] as ServerProcess;
  const headers: Record<string, string> = secret ? { authorization: `Bearer ${secret}` } : {};
  const path = secret ? '/api/open/detect' : '/api/public/detect';
  const res = await fetch(`${target.url}/ext_authz${path}`, { method: 'POST', headers });
  const text = await res.text();
  const code = text ? (JSON.parse(text) as { code: number }).code : undefined;
  return { status: res.status, code, chargeId: res.headers.get('x-charge-id'), at: Date.now() };
}

async function newKey(h: Harness, tier: 'free' | 'pro', accountId?: string) {
  const id =
    accountId ?? (await h.accounts.createAccount({ email: `${tier}-${Math.random()}@example.com`, tier })).id;
  const key = await h.accounts.createKey(id);
  if (!key) throw new Error('no key');
  return { accountId: id, secret: key.secret, keyId: key.record.id };
}

async function dayCount(h: Harness, accountId: string): Promise<number> {
  return (await h.quota.peek(accountSubject(accountId), { perMinute: 1e9, perDay: 1e9 })).day.used;
}

/** Ports of the primary serving each slot range (Cluster). */
async function slotOwners(h: Harness): Promise<Array<{ from: number; to: number; port: number }>> {
  const port = await currentPrimary(h.topology);
  const slots = (await ask(port, ['CLUSTER', 'SLOTS'])) as Array<[number, number, [string, number]]>;
  return slots.map(([from, to, [, p]]) => ({ from, to, port: Number(p) }));
}

async function ownerOf(h: Harness, accountId: string): Promise<number> {
  const slot = keySlot(new RedisLayout(PREFIX).account(accountId));
  const owner = (await slotOwners(h)).find((r) => slot >= r.from && slot <= r.to);
  if (!owner) throw new Error(`slot ${slot} not served`);
  return owner.port;
}

/** Load from `workers` clients over the processes until `stop` resolves (bounded by `maxMs`). */
async function load(
  h: Harness,
  secrets: Array<string | undefined>,
  during: (answers: Map<string | undefined, Answer[]>) => Promise<void>,
  maxMs = 60_000,
  workers = 12,
): Promise<Map<string | undefined, Answer[]>> {
  const answers = new Map<string | undefined, Answer[]>(secrets.map((s) => [s, []]));
  const started = Date.now();
  let running = true;
  const worker = async (w: number) => {
    for (let i = w; running && Date.now() - started < maxMs; i += workers) {
      const secret = secrets[i % secrets.length];
      answers.get(secret)?.push(await call(h, i, secret));
    }
  };
  const all = Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  try {
    await during(answers);
  } finally {
    running = false;
    await all;
  }
  return answers;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The test's own reads and writes around a topology change, tried again while its client catches
 * up (a connection still opening answers "Connection is closed" at once: no offline queue). */
async function settling<T>(write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (attempt === 5) throw err;
      await sleep(200);
    }
  }
}

function expectOnlyAllowedAnswers(answers: Answer[]): void {
  const wrong = answers.filter(
    (a) => !(a.status === 200 || a.status === 429 || (a.status === 503 && a.code === 5001)),
  );
  expect(wrong.slice(0, 5)).toEqual([]);
}

/** First to last 503 (ms), or 0. */
function unavailableWindow(answers: Answer[]): number {
  const times = answers.filter((a) => a.status === 503).map((a) => a.at);
  return times.length ? Math.max(...times) - Math.min(...times) : 0;
}

async function killPrimaryUnderLoad(h: Harness, label: string): Promise<void> {
  // A busy pro account (limits high: only the outage refuses), a second key of it revoked just
  // before the kill, another account and anonymous traffic beside it; a probe key outside the load.
  const busy = await settling(() => newKey(h, 'pro'));
  const revoked = await settling(() => newKey(h, 'pro', busy.accountId));
  const other = await settling(() => newKey(h, 'pro'));
  const probe = await settling(() => newKey(h, 'pro'));
  await h.topology.settled();
  const victimPort =
    h.topology.kind === 'cluster' ? await ownerOf(h, busy.accountId) : await currentPrimary(h.topology);
  const victim = nodeOn(h.topology, victimPort);
  let killedAt = 0;
  let restoredAt = 0;
  const answers = await load(h, [busy.secret, busy.secret, undefined, other.secret], async (so) => {
    await sleep(1000);
    // Acknowledged by a replica (WAIT), then the primary dies at once.
    expect(await h.accounts.revokeKey(revoked.keyId, busy.accountId)).toMatchObject({ id: revoked.keyId });
    await victim.kill();
    killedAt = Date.now();
    await until(
      30_000,
      'a replica to be promoted',
      async () => (await currentPrimary(h.topology)) !== victimPort,
    );
    // Served again through the quota service: the processes found the new primary by themselves.
    await until(30_000, 'the busy account to be served again', async () =>
      (so.get(busy.secret) ?? []).some((a) => a.status === 200 && a.at > killedAt + 100),
    );
    restoredAt = (so.get(busy.secret) ?? []).find((a) => a.status === 200 && a.at > killedAt + 100)?.at ?? 0;
    await sleep(1500);
  });
  const all = [...answers.values()].flat();
  expectOnlyAllowedAnswers(all);
  const busyAnswers = answers.get(busy.secret) ?? [];
  const served = busyAnswers.filter((a) => a.status === 200).length;
  const counted = await settling(() => dayCount(h, busy.accountId));
  const unavailable = all.filter((a) => a.status === 503).length;
  const busyUnavailable = busyAnswers.filter((a) => a.status === 503).length;
  console.log(
    `[${label}] kill -9 primary :${victimPort}: ${all.length} answers, ${unavailable} × 503/5001 over a window of ${unavailableWindow(all)} ms (first to last 503); kill → served again ${restoredAt - killedAt} ms; busy account: ${served} × 200, ${busyUnavailable} × 503, counter ${counted}: counts lost with the old primary (over-admission) ${Math.max(0, served - counted)}, 503s left charged ${Math.max(0, counted - served)}`,
  );
  // Every count is an admitted request's, or a 503's whose refund could not reach the old primary.
  expect(counted).toBeLessThanOrEqual(served + busyUnavailable);
  // Acknowledged before the kill: the revocation, the accounts and keys, on both processes.
  for (const i of [0, 1]) {
    await until(
      30_000,
      `quota process ${i} to serve again`,
      async () => (await call(h, i, probe.secret)).status === 200,
    );
    expect(await call(h, i, revoked.secret)).toMatchObject({ status: 401, code: 4011 });
    expect((await call(h, i, busy.secret)).status).toBe(200);
    expect((await call(h, i, other.secret)).status).toBe(200);
  }
  expect(
    (await settling(() => h.accounts.listKeys(busy.accountId))).find((k) => k.id === revoked.keyId)
      ?.revokedAt,
  ).not.toBeNull();
  // The old primary comes back (empty) as a replica, for the next test.
  await victim.restart();
  await h.topology.settled(30_000);
}

describeWithTool(
  [REDIS_SERVER, REDIS_CLI],
  'quota processes on a Redis Cluster (3 primaries, 3 replicas)',
  () => {
    const get = harness('cluster', {
      // The day's limit is the one reached (a minute may not allow more than its day).
      FREE_PER_DAY: '20',
      FREE_PER_MINUTE: '20',
      PRO_PER_MINUTE: HIGH,
      PRO_PER_DAY: HIGH,
      ANON_PER_MINUTE: HIGH,
      ANON_PER_DAY: HIGH,
      // Exactness, not latency: slow answers on a busy machine must not turn into 503s here.
      REDIS_COMMAND_TIMEOUT_MS: '2000',
    });

    it('admits exactly each account’s limit over all shards, and the counters equal the 200s after refunds', async () => {
      const h = get();
      const keys = await Promise.all(Array.from({ length: 18 }, () => newKey(h, 'free')));
      const owners = await Promise.all(keys.map((k) => ownerOf(h, k.accountId)));
      const shards = new Map<number, number>();
      for (const o of owners) shards.set(o, (shards.get(o) ?? 0) + 1);
      console.log(
        `[cluster exactness] 18 accounts over shards ${JSON.stringify(Object.fromEntries(shards))}`,
      );
      expect(shards.size).toBe(3);
      const answers = await Promise.all(
        keys.flatMap((k, a) =>
          Array.from({ length: 35 }, (_, i) => call(h, a + i, k.secret).then((r) => ({ k, r }))),
        ),
      );
      const refunded = new Map<string, number>();
      for (const k of keys) {
        const mine = answers.filter((x) => x.k === k).map((x) => x.r);
        expectOnlyAllowedAnswers(mine);
        expect(mine.filter((a) => a.status === 200)).toHaveLength(20);
        expect(mine.filter((a) => a.status === 429 && a.code === 4291)).toHaveLength(15);
        // Three of each account's admitted requests "failed upstream": the edge refunds them.
        for (const a of mine.filter((x) => x.status === 200).slice(0, 3)) {
          const target = h.processes[Math.floor(Math.random() * 2)] as ServerProcess;
          const res = await fetch(`${target.url}${REFUND_PATH_PREFIX}/${a.chargeId}`, { method: 'POST' });
          expect(res.status).toBe(204);
        }
        refunded.set(k.accountId, 3);
      }
      for (const k of keys) expect(await dayCount(h, k.accountId)).toBe(20 - 3);
    });

    it('keeps counting exactly while slots migrate between shards (reshard under load)', async () => {
      const h = get();
      const keys = await Promise.all(Array.from({ length: 6 }, () => newKey(h, 'pro')));
      const owners = await slotOwners(h);
      const from = owners[0]?.port as number;
      const to = owners.find((o) => o.port !== from)?.port as number;
      const nodeId = async (port: number) => String(await ask(port, ['CLUSTER', 'MYID']));
      const [fromId, toId] = await Promise.all([nodeId(from), nodeId(to)]);
      const cli = requireTool(REDIS_CLI);
      const answers = await load(
        h,
        keys.map((k) => k.secret),
        async () => {
          await sleep(500);
          await execFileAsync(
            cli,
            [
              '--cluster',
              'reshard',
              `127.0.0.1:${from}`,
              '--cluster-from',
              fromId,
              '--cluster-to',
              toId,
              '--cluster-slots',
              '1000',
              '--cluster-yes',
            ],
            { timeout: 120_000 },
          );
          await new Promise((r) => setTimeout(r, 500));
        },
      );
      const all = [...answers.values()].flat();
      expectOnlyAllowedAnswers(all);
      expect(all.filter((a) => a.status === 429)).toEqual([]);
      for (const k of keys) {
        const served = (answers.get(k.secret) ?? []).filter((a) => a.status === 200).length;
        expect(await dayCount(h, k.accountId)).toBe(served);
      }
      const moved = await slotOwners(h);
      console.log(
        `[cluster reshard] 1000 slots :${from} → :${to} under load: ${all.length} answers, ${all.filter((a) => a.status === 503).length} × 503/5001, counters equal to the 200s; slots now ${JSON.stringify(moved.map((r) => `${r.from}-${r.to}@${r.port}`))}`,
      );
    }, 180_000);

    it('survives kill -9 of the primary holding a busy account, under load', async () => {
      await killPrimaryUnderLoad(get(), 'cluster');
    }, 120_000);
  },
);

describeWithTool(
  REDIS_SERVER,
  'quota processes on Redis Sentinel (1 primary, 2 replicas, 3 sentinels)',
  () => {
    const get = harness('sentinel', {
      PRO_PER_MINUTE: HIGH,
      PRO_PER_DAY: HIGH,
      FREE_PER_MINUTE: HIGH,
      FREE_PER_DAY: HIGH,
      ANON_PER_MINUTE: HIGH,
      ANON_PER_DAY: HIGH,
    });

    describe('failover', () => {
      it('survives kill -9 of the primary under load', async () => {
        await killPrimaryUnderLoad(get(), 'sentinel');
      }, 120_000);
    });
  },
);
