// Configuration is read from the environment once, validated, and frozen. A bad value stops the
// process at boot with a message naming the variable, instead of failing on some later request.
// This file holds the readers and the core every process shares (network, logging, tracing, Redis);
// each process adds its own part (detect/config.ts, quota/config.ts, operator/config.ts, ...) and
// validates nothing it does not use.

import { isAbsolute, resolve } from 'node:path';
import { IPV6_PREFIX_LENGTH } from './client-key.ts';
import { type RedisTarget, redisTargetVar } from './redis-target.ts';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export type Env = Record<string, string | undefined>;

function read(env: Env, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw.trim() === '' ? undefined : raw.trim();
}

export function intVar(
  env: Env,
  name: string,
  fallback: number,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^-?\d+$/.test(raw)) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function numberVar(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) throw new ConfigError(`${name} must be a number, got "${raw}"`);
  if (value < min || value > max)
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function stringVar(env: Env, name: string, fallback: string): string {
  return read(env, name) ?? fallback;
}

export function optionalVar(env: Env, name: string): string | undefined {
  return read(env, name);
}

/** A file path, resolved against the working directory; must not name a directory. */
export function pathVar(env: Env, name: string, fallback: string): string {
  const raw = read(env, name) ?? fallback;
  if (raw.endsWith('/') || raw.includes('\0'))
    throw new ConfigError(`${name} must be a file path, got "${raw}"`);
  return isAbsolute(raw) ? raw : resolve(process.cwd(), raw);
}

export function enumVar<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  }
  return raw as T;
}

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface CoreConfig {
  host: string;
  logLevel: LogLevel;
  /** How many X-Forwarded-For hops the trusted edge adds (0 = use the socket address). */
  trustedProxyHops: number;
  /** Per-address limits count an IPv6 client by its network of this many bits (client-key.ts). */
  clientIpv6PrefixLength: number;
  shutdownGraceMs: number;
  /**
   * On SIGTERM, how long a service first keeps serving, not ready and closing each connection after its
   * answer (services/common/drain.ts), so that load balancers let go of it; part of the grace period.
   */
  shutdownDelayMs: number;
  /**
   * Share of new traces recorded and exported (0–1). Parent-based: a request that arrives with a
   * `traceparent` follows its sampled flag; the ratio decides only for traces that start here.
   */
  traceSampleRatio: number;
  /** Set → counters, accounts, keys and sessions live in Redis; unset → memory + accounts file. */
  redisTarget: RedisTarget | undefined;
  redis: {
    /** Bound on every Redis command; past it the request answers 503/5001. */
    commandTimeoutMs: number;
    /** A connection that answers nothing this long while commands wait is dropped and reconnected. */
    socketTimeoutMs: number;
    connectTimeoutMs: number;
    /** Prefix of every key this service writes, so one Redis can serve several deployments. */
    keyPrefix: string;
  };
}

export function loadCoreConfig(env: Env): CoreConfig {
  const ipv6 = IPV6_PREFIX_LENGTH;
  return {
    host: stringVar(env, 'HOST', '0.0.0.0'),
    logLevel: enumVar(
      env,
      'LOG_LEVEL',
      ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
      'info',
    ),
    trustedProxyHops: intVar(env, 'TRUSTED_PROXY_HOPS', 0, 0, 10),
    clientIpv6PrefixLength: intVar(env, 'CLIENT_IPV6_PREFIX_LENGTH', ipv6.fallback, ipv6.min, 128),
    shutdownGraceMs: intVar(env, 'SHUTDOWN_GRACE_MS', 25_000, 0),
    shutdownDelayMs: intVar(env, 'SHUTDOWN_DELAY_MS', 0, 0, 60_000),
    traceSampleRatio: numberVar(env, 'TRACE_SAMPLE_RATIO', 1, 0, 1),
    redisTarget: redisTargetVar(env),
    redis: {
      commandTimeoutMs: intVar(env, 'REDIS_COMMAND_TIMEOUT_MS', 500, 1, 60_000),
      socketTimeoutMs: intVar(env, 'REDIS_SOCKET_TIMEOUT_MS', 1000, 1, 600_000),
      connectTimeoutMs: intVar(env, 'REDIS_CONNECT_TIMEOUT_MS', 1000, 1, 60_000),
      keyPrefix: stringVar(env, 'REDIS_KEY_PREFIX', 'nsfwd:'),
    },
  };
}

/** A port variable (0 = any free port, announced once listening). */
export function portVar(env: Env, name: string, fallback: number): number {
  return intVar(env, name, fallback, 0, 65535);
}

/**
 * A process's first step: its validated configuration, or — for a bad value — one line naming the
 * variable on stderr and exit code 2, before anything else starts.
 */
export function loadOrExit<T>(who: string, load: (env: Env) => T, env: Env = process.env): T {
  try {
    return Object.freeze(load(env));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`${who}: invalid configuration: ${err.message}`);
    process.exit(2);
  }
}
