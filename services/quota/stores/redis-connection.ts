// One place that decides how this service talks to Redis. The options make a Redis outage cheap and
// visible instead of slow: every command is bounded by `commandTimeout`; while disconnected commands
// fail at once (`enableOfflineQueue: false`) instead of queueing; a command that was in flight when
// the connection dropped is failed, not retried (`maxRetriesPerRequest: 0`), so requests answer
// 503/5001 within the timeout; a Redis that hangs (accepts, never answers) is dropped after
// `socketTimeout`, so the commands waiting on it cannot pile up. Reconnection runs forever in the background with
// a capped back-off, so the service recovers by itself when Redis is back.

import { Redis } from 'ioredis';

export interface RedisConnectionOptions {
  url: string;
  commandTimeoutMs: number;
  socketTimeoutMs: number;
  connectTimeoutMs: number;
  /** Shown in CLIENT LIST. */
  name?: string;
  /** Each connection error (metrics); reconnection goes on regardless. */
  onError?: (err: Error) => void;
}

const MAX_RECONNECT_DELAY_MS = 500;

export function connectRedis(opts: RedisConnectionOptions): Redis {
  const redis = new Redis(opts.url, {
    commandTimeout: opts.commandTimeoutMs,
    socketTimeout: opts.socketTimeoutMs,
    connectTimeout: opts.connectTimeoutMs,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (times) => Math.min(50 * times, MAX_RECONNECT_DELAY_MS),
    connectionName: opts.name ?? 'nsfwdetector',
    disableClientInfo: true,
  });
  // Connection errors are reported through the commands that fail (→ 503/5001, logged by the caller);
  // without a listener ioredis would print every reconnect attempt as an unhandled 'error'.
  redis.on('error', (err: Error) => opts.onError?.(err));
  return redis;
}

/** Resolves once the connection is ready; rejects after `timeoutMs` (e.g. Redis down at boot). */
export function redisReady(redis: Redis, timeoutMs: number): Promise<void> {
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
export async function closeRedis(redis: Redis): Promise<void> {
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

/** A Lua script run by SHA, loaded on demand (first use, and after a Redis restart flushed it). */
export class LuaScript {
  readonly #source: string;
  #sha: string | undefined;

  constructor(source: string) {
    this.#source = source;
  }

  async run(redis: Redis, keys: string[], args: Array<string | number>): Promise<unknown> {
    const argv = args.map(String);
    this.#sha ??= (await redis.script('LOAD', this.#source)) as string;
    try {
      return await redis.evalsha(this.#sha, keys.length, ...keys, ...argv);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      this.#sha = (await redis.script('LOAD', this.#source)) as string;
      return redis.evalsha(this.#sha, keys.length, ...keys, ...argv);
    }
  }
}
