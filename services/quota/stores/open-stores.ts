// Composition-root helper: the one place that picks the store implementations, by configuration.
// A Redis configured (REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES) → counters, accounts, keys and
// sessions in Redis (shared by every replica); none → counters in memory, accounts/keys/sessions in
// the ACCOUNTS_FILE, an SQLite database (embedded `npm start`).
// Used by the embedded server, the quota server, the admin CLI and the benchmark.

import { BootFailure, withCause } from '../../../lib/common/boot.ts';
import type { AccountStore, SessionStore } from '../accounts/account-store.ts';
import { ComposedKeyQuota, type KeyQuota } from '../authorize.ts';
import type { StoresConfig } from '../config.ts';
import type { QuotaStore } from '../quota-store.ts';
import type { SharedBudgetStore } from '../shared-budget.ts';
import { AccountsFileError } from './accounts-file-error.ts';
import { MemoryQuotaStore } from './memory-quota-store.ts';
import { RedisAccountStore } from './redis-account-store.ts';
import { connectRedis, redisReady } from './redis-connection.ts';
import { RedisKeyQuota } from './redis-key-quota.ts';
import { PendingCharges, RedisQuotaStore } from './redis-quota-store.ts';
import { openSqliteAccountStore } from './sqlite-account-store.ts';

export interface Stores {
  kind: 'redis' | 'embedded';
  quotaStore: QuotaStore & SharedBudgetStore;
  accountStore: AccountStore;
  sessionStore: SessionStore;
  /** The key path of authorize(): resolve + count (one Redis round trip with Redis). */
  keyQuota: KeyQuota;
  /** Resolves while every store answers (Redis: a PING on each connection, bounded); readiness. */
  ping(): Promise<void>;
  /** Closes every store (and its connection) once. */
  close(): Promise<void>;
}

export interface OpenStoresOptions {
  /** A name for the Redis connections (CLIENT LIST). */
  clientName?: string;
  /**
   * How long to wait for Redis at startup. A server starts anyway when Redis is not there yet
   * (requests answer 503/5001 until it is); the admin CLI passes `required` and fails instead.
   */
  waitForRedisMs?: number;
  required?: boolean;
  onRedisNotReady?: (err: unknown) => void;
  /** Each Redis connection error, with the connection's role (metrics). */
  onRedisError?: (err: Error, connection: string) => void;
}

export async function openStores(config: StoresConfig, opts: OpenStoresOptions = {}): Promise<Stores> {
  const target = config.redisTarget;
  if (target === undefined) {
    if (config.accountsFile === undefined) throw new Error('no Redis configured and no accounts file');
    const local = openSqliteAccountStore(config.accountsFile, {
      touchIntervalMs: config.keyLastUsedIntervalMs,
    });
    const quotaStore = new MemoryQuotaStore();
    return {
      kind: 'embedded',
      quotaStore,
      accountStore: local,
      sessionStore: local,
      keyQuota: new ComposedKeyQuota(local, quotaStore),
      ping: async () => undefined,
      close: once(async () => {
        await quotaStore.close();
        await local.close();
      }),
    };
  }
  const connection = (role: string) =>
    connectRedis({
      target,
      commandTimeoutMs: config.redis.commandTimeoutMs,
      socketTimeoutMs: config.redis.socketTimeoutMs,
      connectTimeoutMs: config.redis.connectTimeoutMs,
      name: `${opts.clientName ?? 'nsfwdetector'}-${role}`,
      onError: (err) => opts.onRedisError?.(err, role),
    });
  const quotaRedis = connection('quota');
  const accountRedis = connection('accounts');
  const pending = new PendingCharges();
  const quotaStore = new RedisQuotaStore(quotaRedis, config.redis.keyPrefix, pending);
  // The replica's acknowledgement is bounded a little under the command's own timeout, so that a
  // missing one is reported as such rather than as a timeout.
  const accounts = new RedisAccountStore(
    accountRedis,
    config.redis.keyPrefix,
    {
      replicas: target.waitReplicas,
      waitMs: Math.max(1, Math.floor(config.redis.commandTimeoutMs * 0.8)),
    },
    { touchIntervalMs: config.keyLastUsedIntervalMs },
  );
  const stores: Stores = {
    kind: 'redis',
    quotaStore,
    accountStore: accounts,
    sessionStore: accounts,
    keyQuota: new RedisKeyQuota(quotaRedis, config.redis.keyPrefix, pending),
    ping: async () => {
      await Promise.all([quotaRedis.ping(), accountRedis.ping()]);
    },
    close: once(async () => {
      await quotaStore.close();
      await accounts.close();
    }),
  };
  const waitMs = opts.waitForRedisMs ?? config.redis.connectTimeoutMs;
  try {
    await Promise.all([redisReady(quotaRedis, waitMs), redisReady(accountRedis, waitMs)]);
  } catch (err) {
    if (opts.required) {
      await stores.close();
      throw err;
    }
    opts.onRedisNotReady?.(err);
  }
  return stores;
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    running ??= fn();
    return running;
  };
}

/**
 * A process's stores, for its `compose` step. An accounts file that cannot be used, or with `required`
 * a Redis not reachable within its wait, is a boot failure (a BootFailure: runProcess prints one line
 * naming it and exits 2). Without `required` a Redis not reachable yet is not (`onRedisNotReady`: the
 * server starts and answers 503 until it is, so that a pod started before its Redis waits for it).
 */
export async function openStoresOrExit(
  who: string,
  config: StoresConfig,
  opts: OpenStoresOptions = {},
): Promise<Stores> {
  try {
    return await openStores(config, {
      onRedisNotReady: (err) =>
        console.error(`${who}: Redis not reachable yet; answering 503 until it is (${withCause(err)})`),
      ...opts,
    });
  } catch (err) {
    if (err instanceof AccountsFileError) throw new BootFailure(withCause(err));
    if (opts.required && config.redisTarget !== undefined)
      throw new BootFailure(`Redis not reachable: ${withCause(err)}`);
    throw err;
  }
}
