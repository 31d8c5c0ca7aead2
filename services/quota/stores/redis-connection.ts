// One place that decides how this service talks to Redis, in each topology (single URL, Sentinel,
// Cluster: lib/common/redis-target.ts). The options make a Redis outage cheap and visible instead
// of slow: every command is bounded by `commandTimeout`; while disconnected commands fail at once
// (`enableOfflineQueue: false`) instead of queueing; a command that was in flight when the connection
// dropped is failed, not retried (`maxRetriesPerRequest: 0`; in a Cluster `retryDelayOnFailover: 0`),
// since it may have run, so requests answer 503/5001 within the timeout; a Redis that hangs (accepts,
// never answers) is dropped after `socketTimeout`, so the commands waiting on it cannot pile up.
// Reconnection runs forever in the background with a capped back-off, so the service recovers by
// itself when Redis is back, or (Sentinel) when a replica has been promoted: the client asks the
// sentinels for the primary at each reconnection (a killed primary drops the connection; a demoted one
// answers READONLY, which reconnects; a primary handing over refuses writes with NOREPLICAS first: a
// script refused either way is run again until it runs on the new primary, for up to HANDOVER_WAIT_MS).
// ioredis's `failoverDetector` is not used: its disconnect can cut a reconnection under way and leave
// the client ended. In a Cluster, MOVED and ASK are followed by the client (the
// command did not run), and so is TRYAGAIN after a short delay (a slot being migrated); CLUSTERDOWN
// fails at once (503).

import { createHash } from 'node:crypto';
import { type ChainableCommander, Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { RedisEndpoint } from '../../../lib/common/redis-target.ts';
import { keySlot } from './redis-layout.ts';

/** A connection to a single Redis or Sentinel-managed primary, or to a Redis Cluster. */
export type RedisClient = Redis | Cluster;

export interface RedisConnectionOptions {
  /** The topology, or a single Redis's URL. */
  target: RedisEndpoint | string;
  commandTimeoutMs: number;
  socketTimeoutMs: number;
  connectTimeoutMs: number;
  /** Shown in CLIENT LIST. */
  name?: string;
  /** Each connection error (metrics); reconnection goes on regardless. */
  onError?: (err: Error) => void;
}

const MAX_RECONNECT_DELAY_MS = 500;
/** A slot being migrated answers TRYAGAIN to a script whose keys are split for a moment: not run. */
const TRY_AGAIN_DELAY_MS = 20;

const backOff = (times: number) => Math.min(50 * times, MAX_RECONNECT_DELAY_MS);

export function connectRedis(opts: RedisConnectionOptions): RedisClient {
  const target: RedisEndpoint =
    typeof opts.target === 'string' ? { mode: 'single', url: opts.target } : opts.target;
  const common: RedisOptions = {
    commandTimeout: opts.commandTimeoutMs,
    socketTimeout: opts.socketTimeoutMs,
    connectTimeout: opts.connectTimeoutMs,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectionName: opts.name ?? 'nsfwdetector',
    disableClientInfo: true,
    ...(target.username === undefined ? {} : { username: target.username }),
    ...(target.password === undefined ? {} : { password: target.password }),
  };
  let redis: RedisClient;
  if (target.mode === 'cluster') {
    const clusterOptions: ClusterOptions = {
      enableOfflineQueue: false,
      scaleReads: 'master',
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
      retryDelayOnTryAgain: TRY_AGAIN_DELAY_MS,
      retryDelayOnMoved: 0,
      slotsRefreshTimeout: opts.connectTimeoutMs,
      clusterRetryStrategy: backOff,
      redisOptions: common,
    };
    const cluster = new Cluster(target.nodes, clusterOptions);
    // A node's connection is opened by its first command, and commands sent while it is opening fail
    // (no offline queue): open each as soon as the client learns of the node (boot, failover, reshard).
    cluster.on('+node', (node: Redis) => {
      if (node.status === 'wait') node.connect().catch(() => undefined);
    });
    redis = cluster;
  } else {
    const options: RedisOptions = {
      ...common,
      enableOfflineQueue: false,
      retryStrategy: backOff,
    };
    redis =
      target.mode === 'single'
        ? new Redis(target.url, options)
        : new Redis({
            ...options,
            sentinels: target.sentinels,
            name: target.masterName,
            role: 'master',
            ...(target.sentinelPassword === undefined ? {} : { sentinelPassword: target.sentinelPassword }),
            sentinelCommandTimeout: opts.commandTimeoutMs,
            sentinelRetryStrategy: backOff,
            // A primary demoted by a planned failover answers writes with READONLY: reconnect, which
            // asks the sentinels again (scripts refused so run again: LuaScript.run).
            reconnectOnError: (err) => {
              if (!refusedByReplica(err)) return false;
              handovers.set(sentinelClient, {
                refusedAt: Date.now(),
                readyAt: handovers.get(sentinelClient)?.readyAt ?? 0,
              });
              return true;
            },
          });
    const sentinelClient = redis;
    if (target.mode === 'sentinel')
      redis.on('ready', () => {
        const seen = handovers.get(sentinelClient);
        if (seen) seen.readyAt = Date.now();
      });
    keepConnecting(redis);
  }
  // Connection errors are reported through the commands that fail (→ 503/5001, logged by the caller);
  // without a listener ioredis would print every reconnect attempt as an unhandled 'error'.
  redis.on('error', (err: Error) => opts.onError?.(err));
  return redis;
}

const closedByUs = new WeakSet<RedisClient>();

/** ioredis gives a connection up for good ('end') when a connect attempt fails in some ways (a sentinel
 * conversation cut by a failover, for one); a service must reconnect until it is closed. */
function keepConnecting(redis: Redis): void {
  let attempts = 0;
  redis.on('ready', () => {
    attempts = 0;
  });
  redis.on('end', () => {
    if (closedByUs.has(redis)) return;
    setTimeout(() => {
      if (!closedByUs.has(redis) && redis.status === 'end') redis.connect().catch(() => undefined);
    }, backOff(++attempts)).unref();
  });
}

export function isCluster(redis: RedisClient): redis is Cluster {
  return redis instanceof Cluster;
}

/** Resolves once the connection is ready (a Cluster: with a connection to every primary); rejects
 * after `timeoutMs` (e.g. Redis down at boot). */
export async function redisReady(redis: RedisClient, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await readyEvent(redis, timeoutMs);
  if (!isCluster(redis)) return;
  while (!redis.nodes('master').every((node) => node.status === 'ready')) {
    if (Date.now() > deadline)
      throw new Error(`Redis Cluster primaries not all connected after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function readyEvent(redis: RedisClient, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    let lastError: unknown;
    const onError = (err: unknown) => {
      lastError = err;
    };
    const onReady = () => {
      cleanup();
      resolve();
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`Redis not ready after ${timeoutMs} ms`, { cause: lastError }));
    }, timeoutMs);
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      redis.off('error', onError);
    };
    redis.on('ready', onReady);
    redis.on('error', onError);
  });
}

/** Closes politely when connected, at once otherwise (QUIT would be refused offline). */
export async function closeRedis(redis: RedisClient): Promise<void> {
  closedByUs.add(redis);
  if (redis.status === 'end') return;
  if (redis.status === 'ready') {
    try {
      await redis.quit();
      return;
    } catch {
      // Fall through: the connection is going away anyway.
    }
  }
  redis.disconnect();
}

/** A Lua script run by SHA; where a node does not have it yet (first use, a restart, a promoted
 * replica, a new Cluster node), EVAL runs it and leaves it cached there. Its keys are all in KEYS and
 * in one hash slot, so a Cluster routes it by its first key. */
export class LuaScript {
  readonly source: string;
  readonly #sha: string;

  constructor(source: string) {
    this.source = source;
    this.#sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: RedisClient, keys: string[], args: Array<string | number>): Promise<unknown> {
    const argv = args.map(String);
    const deadline = Date.now() + HANDOVER_WAIT_MS;
    for (;;) {
      try {
        return await this.#run(redis, keys, argv);
      } catch (err) {
        // A primary handing over (its preStop: charts/nsfwdetector/files/redis-node.sh) refuses writes
        // with NOREPLICAS until a replica is promoted, then answers READONLY as that replica's replica,
        // and the client, reconnecting through the sentinels, refuses what is sent meanwhile: none of
        // them ran. Again, until it runs on the new primary, rather than a 503 for a planned handover.
        // Anything else (a connection lost, a timeout: it may have run) still fails at once.
        if (isCluster(redis) || !(refusedForHandover(err) || refusedByReplica(err) || notSent(err)))
          throw err;
        const left = deadline - Date.now();
        if (left <= 0) throw err;
        if (refusedForHandover(err))
          await new Promise((r) => setTimeout(r, Math.min(REFUSED_RETRY_MS, left)));
        else if (!(await afterHandover(redis, left))) throw err;
      }
    }
  }

  async #run(redis: RedisClient, keys: string[], argv: string[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.#sha, keys.length, ...keys, ...argv);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      return redis.eval(this.source, keys.length, ...keys, ...argv);
    }
  }
}

/**
 * How long a script refused by a primary handing over is tried again: the handover takes ~1.3 s here
 * (the sentinels see the promotion by their once-a-second INFO), and Envoy's ext_authz waits 2 s for
 * the quota service's answer.
 */
export const HANDOVER_WAIT_MS = 1_800;

/** Between tries while the old primary refuses writes (a round trip each; a handover takes ~1.3 s). */
const REFUSED_RETRY_MS = 50;

/** A primary refusing writes (min-replicas-to-write, as its preStop sets it): the command did not run. */
const refusedForHandover = (err: unknown): boolean =>
  err instanceof Error && err.message.startsWith('NOREPLICAS');

/** A replica's refusal of a write: the command did not run. */
const refusedByReplica = (err: unknown): boolean =>
  err instanceof Error && err.message.startsWith('READONLY');

/** ioredis's refusal of a command while it reconnects (no offline queue): the command was not sent. */
const notSent = (err: unknown): boolean =>
  err instanceof Error && err.message.startsWith("Stream isn't writeable");

/** How long after a READONLY a refused script waits for the new primary. */
const HANDOVER_WINDOW_MS = 5_000;

/** Per Sentinel client: when a primary last refused it with READONLY, when it was last ready. */
const handovers = new WeakMap<Redis, { refusedAt: number; readyAt: number }>();

/**
 * Whether `redis` is (or becomes, within `ms`) connected to the primary that replaced one that
 * refused it with READONLY in the last few seconds. False for anything else: no handover, no wait.
 */
function afterHandover(redis: Redis, ms: number): Promise<boolean> {
  const seen = handovers.get(redis);
  if (!seen || Date.now() - seen.refusedAt > HANDOVER_WINDOW_MS || ms <= 0) return Promise.resolve(false);
  // Reconnected since the refusal: at once. ioredis closes the refused connection asynchronously, so
  // its status may still say ready; the next 'ready' event is the new connection's.
  if (seen.readyAt > seen.refusedAt && redis.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ready: boolean) => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      resolve(ready);
    };
    const onReady = () => done(true);
    const timer = setTimeout(() => done(false), ms);
    redis.on('ready', onReady);
  });
}

/** A write the primary applied but fewer replicas than required acknowledged in time: it may be lost
 * if the primary dies now. Callers answer it like any store failure (503/5001, "unknown"); the writes
 * it guards are safe to repeat (a revocation, a tier) or refuse a repeat visibly (email taken). */
export class NotReplicatedError extends Error {
  override name = 'NotReplicatedError';
}

/** How a store makes its writes durable: WAIT for `replicas` acknowledgements, up to `waitMs`. */
export interface Replication {
  replicas: number;
  waitMs: number;
}

export const NO_REPLICATION: Replication = { replicas: 0, waitMs: 0 };

/**
 * Runs the writes queued by `write` (keys in one slot) and, when replicas are required, a WAIT on the
 * connection that ran them; resolves with the writes' replies. A write answered by fewer replicas
 * than required rejects with NotReplicatedError. One round trip on a single Redis or Sentinel; two in a
 * Cluster, where the writes go as a plain pipeline (MOVED and ASK are followed) and the WAIT then goes
 * to the node that took them (a pipeline holding a WAIT would not be redirected).
 */
export async function writeReplicated(
  redis: RedisClient,
  replication: Replication,
  /** A key the writes touch: it names the slot (and so, in a Cluster, the primary to wait on). */
  slotKey: string,
  write: (pipeline: ChainableCommander) => void,
): Promise<unknown[]> {
  const waits = replication.replicas > 0;
  const pipeline = redis.pipeline();
  write(pipeline);
  if (waits && !isCluster(redis)) pipeline.wait(replication.replicas, replication.waitMs);
  const values = ((await pipeline.exec()) ?? []).map(([err, value]) => {
    if (err) throw err;
    return value;
  });
  if (!waits) return values;
  let acknowledged: number;
  if (isCluster(redis)) {
    acknowledged = await waitOnOwner(redis, slotKey, replication);
  } else {
    acknowledged = Number(values.pop());
  }
  if (acknowledged < replication.replicas)
    throw new NotReplicatedError(
      `Written, but acknowledged by ${acknowledged} of ${replication.replicas} replica(s) within ${replication.waitMs} ms`,
    );
  return values;
}

/** WAIT on the connection to the primary that serves `key`'s slot. */
async function waitOnOwner(cluster: Cluster, key: string, replication: Replication): Promise<number> {
  const owner = cluster.slots[keySlot(key)]?.[0];
  const node = cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw new NotReplicatedError(`No connection to the primary of ${key} to wait on`);
  return Number(await node.wait(replication.replicas, replication.waitMs));
}

/** Queues a script by source (a pipeline cannot fall back from EVALSHA; these writes are rare). */
export function queueScript(
  pipeline: ChainableCommander,
  script: LuaScript,
  keys: string[],
  args: Array<string | number>,
): void {
  pipeline.eval(script.source, keys.length, ...keys, ...args.map(String));
}
