// Real Redis topologies on loopback for tests and benchmarks, each started once per file:
//   single    one redis-server
//   sentinel  1 primary + 2 replicas, 3 sentinels (quorum 2, down after 500 ms)
//   cluster   3 primaries + 3 replicas (node timeout 1000 ms), created with `redis-cli --cluster create`
// Sentinels are `redis-server <conf> --sentinel` (Debian's redis-sentinel package ships the same
// binary); `redis-cli` comes with redis-tools, a dependency of redis-server. Each instance has its own
// port and temp dir (RedisServer); `stop` kills and removes them all, and a
// start that fails stops what it had started. Failovers are waited for by polling, with a deadline.

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import type { RedisEndpoint } from '../../lib/common/redis-target.ts';
import { RedisServer } from './redis-server.ts';
import { REDIS_CLI, requireTool } from './tools.ts';

const execFileAsync = promisify(execFile);

export type TopologyKind = 'single' | 'sentinel' | 'cluster';
export const TOPOLOGY_KINDS: readonly TopologyKind[] = ['single', 'sentinel', 'cluster'];

const MASTER_NAME = 'nsfwd';
/** Replication starts at once (the default waits 5 s for more replicas to sync together). */
const FAST_SYNC = ['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0'];
const CLUSTER_NODE_TIMEOUT_MS = 1000;

export interface RedisTopology {
  kind: TopologyKind;
  /** For connectRedis. */
  endpoint: RedisEndpoint;
  /** For a process's environment (REDIS_URL, or REDIS_SENTINELS + master, or REDIS_CLUSTER_NODES). */
  env: Record<string, string>;
  /** Every data node (primaries and replicas), and the sentinels. */
  nodes: RedisServer[];
  sentinels: RedisServer[];
  /** Resolves when every primary has its replicas connected and caught up. */
  settled(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startTopology(kind: TopologyKind): Promise<RedisTopology> {
  const started: RedisServer[] = [];
  const starting: Promise<unknown>[] = [];
  const start = async (opts: Parameters<typeof RedisServer.start>[0] = {}) => {
    const starts = RedisServer.start(opts);
    starting.push(starts);
    const server = await starts;
    started.push(server);
    return server;
  };
  try {
    if (kind === 'single') return single(await start());
    if (kind === 'sentinel') return await sentinel(start, started);
    return await cluster(start, started);
  } catch (err) {
    // Starts run in parallel: those still under way when one failed are waited for, so that every
    // server started is stopped, not left running.
    await Promise.allSettled(starting);
    await Promise.allSettled(started.map((s) => s.stop()));
    throw err;
  }
}

function stopAll(servers: RedisServer[]): () => Promise<void> {
  return async () => {
    await Promise.allSettled(servers.map((s) => s.stop()));
  };
}

function single(server: RedisServer): RedisTopology {
  return {
    kind: 'single',
    endpoint: { mode: 'single', url: server.url },
    env: { REDIS_URL: server.url },
    nodes: [server],
    sentinels: [],
    settled: async () => undefined,
    stop: stopAll([server]),
  };
}

async function sentinel(
  start: (opts?: Parameters<typeof RedisServer.start>[0]) => Promise<RedisServer>,
  started: RedisServer[],
): Promise<RedisTopology> {
  const primary = await start({ args: FAST_SYNC });
  const replicas = await Promise.all(
    [0, 1].map(() => start({ args: [...FAST_SYNC, '--replicaof', '127.0.0.1', String(primary.port)] })),
  );
  const config = () =>
    [
      `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${primary.port} 2`,
      `sentinel down-after-milliseconds ${MASTER_NAME} 500`,
      `sentinel failover-timeout ${MASTER_NAME} 3000`,
      `sentinel parallel-syncs ${MASTER_NAME} 2`,
    ].join('\n');
  const sentinels = await Promise.all([0, 1, 2].map(() => start({ sentinelConfig: config })));
  const list = sentinels.map((s) => `127.0.0.1:${s.port}`).join(',');
  const topology: RedisTopology = {
    kind: 'sentinel',
    endpoint: {
      mode: 'sentinel',
      sentinels: sentinels.map((s) => s.address),
      masterName: MASTER_NAME,
    },
    env: { REDIS_SENTINELS: list, REDIS_SENTINEL_MASTER: MASTER_NAME },
    nodes: [primary, ...replicas],
    sentinels,
    settled: (timeoutMs = 20_000) =>
      until(timeoutMs, 'the sentinels to agree on a primary with 2 replicas in sync', async () => {
        const masters = await Promise.all(
          sentinels.map((s) => ask(s.port, ['SENTINEL', 'get-master-addr-by-name', MASTER_NAME])),
        );
        const ports = new Set(masters.map((m) => (Array.isArray(m) ? String(m[1]) : '')));
        if (ports.size !== 1) return false;
        const port = Number([...ports][0]);
        const known = await Promise.all(
          sentinels.map((s) => ask(s.port, ['SENTINEL', 'replicas', MASTER_NAME])),
        );
        if (!known.every((r) => Array.isArray(r) && r.length >= 2)) return false;
        // Each sentinel must know the other two (they find each other through the primary's
        // hello channel, every 2 s), or a failover finds no quorum of votes.
        const peers = await Promise.all(
          sentinels.map((s) => ask(s.port, ['SENTINEL', 'sentinels', MASTER_NAME])),
        );
        if (!peers.every((r) => Array.isArray(r) && r.length >= 2)) return false;
        return inSync(port, 2);
      }),
    stop: stopAll(started),
  };
  await topology.settled();
  return topology;
}

async function cluster(
  start: (opts?: Parameters<typeof RedisServer.start>[0]) => Promise<RedisServer>,
  started: RedisServer[],
): Promise<RedisTopology> {
  const cli = requireTool(REDIS_CLI);
  const nodes = await Promise.all(
    Array.from({ length: 6 }, () =>
      start({
        args: [
          ...FAST_SYNC,
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-node-timeout',
          String(CLUSTER_NODE_TIMEOUT_MS),
          // The shards whose primary is alive keep answering while one fails over.
          '--cluster-require-full-coverage',
          'no',
        ],
      }),
    ),
  );
  await execFileAsync(
    cli,
    [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      '1',
      '--cluster-yes',
    ],
    { timeout: 30_000 },
  );
  const topology: RedisTopology = {
    kind: 'cluster',
    endpoint: { mode: 'cluster', nodes: nodes.slice(0, 3).map((n) => n.address) },
    env: { REDIS_CLUSTER_NODES: nodes.map((n) => `127.0.0.1:${n.port}`).join(',') },
    nodes,
    sentinels: [],
    settled: (timeoutMs = 20_000) =>
      until(
        timeoutMs,
        'the cluster to cover every slot with 3 primaries, each with a replica in sync',
        async () => {
          const primaries = await clusterPrimaries(nodes);
          if (primaries.length !== 3) return false;
          for (const port of primaries) if (!(await inSync(port, 1))) return false;
          const states = await Promise.all(
            nodes.map((n) => ask(n.port, ['CLUSTER', 'INFO']).catch(() => 'down')),
          );
          return states.every((s) => s === 'down' || String(s).includes('cluster_state:ok'));
        },
      ),
    stop: stopAll(started),
  };
  await topology.settled();
  return topology;
}

/** Ports of the cluster's primaries that own slots, as the live nodes see them. */
export async function clusterPrimaries(nodes: RedisServer[]): Promise<number[]> {
  for (const n of nodes) {
    const reply = await ask(n.port, ['CLUSTER', 'NODES']).catch(() => undefined);
    if (typeof reply !== 'string') continue;
    return reply
      .split('\n')
      .filter((line) => /\bmaster\b/.test(line) && !/\bfail\b/.test(line) && line.split(' ').length > 8)
      .map((line) => Number((line.split(' ')[1] ?? '').split('@')[0]?.split(':')[1]));
  }
  return [];
}

/** The port of the current primary (Sentinel: as the sentinels say; single: the server). */
export async function currentPrimary(topology: RedisTopology): Promise<number> {
  if (topology.kind === 'single') return (topology.nodes[0] as RedisServer).port;
  if (topology.kind === 'sentinel') {
    for (const s of topology.sentinels) {
      const m = await ask(s.port, ['SENTINEL', 'get-master-addr-by-name', MASTER_NAME]).catch(
        () => undefined,
      );
      if (Array.isArray(m)) return Number(m[1]);
    }
    throw new Error('no sentinel answered');
  }
  const [first] = await clusterPrimaries(topology.nodes);
  if (first === undefined) throw new Error('no cluster node answered');
  return first;
}

/** Whether the primary on `port` has at least `replicas` replicas online at its own offset. */
async function inSync(port: number, replicas: number): Promise<boolean> {
  const info = await ask(port, ['INFO', 'replication']).catch(() => '');
  if (typeof info !== 'string' || !info.includes('role:master')) return false;
  const offset = Number(/master_repl_offset:(\d+)/.exec(info)?.[1] ?? -1);
  const online = [...info.matchAll(/slave\d+:.*state=online,offset=(\d+)/g)].filter(
    (m) => Number(m[1]) === offset,
  );
  return online.length >= replicas;
}

/** One command on a short-lived connection to a node; rejects if the node does not answer. */
export async function ask(port: number, command: string[]): Promise<unknown> {
  const redis = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    enableOfflineQueue: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 500,
    commandTimeout: 2000,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const [name, ...args] = command;
    return await redis.call(name as string, ...args);
  } finally {
    redis.disconnect();
  }
}

/** Polls `check` until it holds, at most `timeoutMs`; the error names what was waited for. */
export async function until(timeoutMs: number, what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** The node serving `port`. */
export function nodeOn(topology: RedisTopology, port: number): RedisServer {
  const node = topology.nodes.find((n) => n.port === port);
  if (!node) throw new Error(`no node on port ${port}`);
  return node;
}
