// Configuration is read from the environment once, validated, and frozen. A bad value stops the
// process at boot with a message naming the variable, instead of failing on some later request.
// This file holds the readers and the core every process shares (network, logging, tracing, Redis);
// each process adds its own part (detect/config.ts, quota/config.ts, operator/config.ts, ...) and
// validates nothing it does not use.

import { isAbsolute, resolve } from 'node:path';
import { type RedisTarget, redisTargetVar } from './redis-target.ts';
import {
  type BelowName,
  type EnumName,
  type EnumValue,
  type IntegerName,
  type NumberName,
  type OptionalIntegerName,
  type OptionalStringName,
  SETTINGS,
  type StringName,
} from './settings.ts';

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

// Readers of the settings table (settings.ts): the default and the range are the table's.

export function intSetting(env: Env, name: IntegerName): number {
  const s = SETTINGS[name];
  return intVar(env, name, s.default, s.min, 'max' in s ? s.max : undefined);
}

/** An integer setting unset by default: undefined when not given. */
export function optionalIntSetting(env: Env, name: OptionalIntegerName): number | undefined {
  const s = SETTINGS[name];
  if (read(env, name) === undefined) return undefined;
  return intVar(env, name, 0, s.min, 'max' in s ? s.max : undefined);
}

export function numberSetting(env: Env, name: NumberName): number {
  const s = SETTINGS[name];
  return numberVar(env, name, s.default, s.min, s.max);
}

export function stringSetting(env: Env, name: StringName): string {
  return stringVar(env, name, SETTINGS[name].default);
}

export function optionalStringSetting(env: Env, name: OptionalStringName): string | undefined {
  return optionalVar(env, name);
}

export function pathSetting(env: Env, name: StringName): string {
  return pathVar(env, name, SETTINGS[name].default);
}

export function enumSetting<N extends EnumName>(env: Env, name: N): EnumValue<N> {
  const s = SETTINGS[name];
  return enumVar<EnumValue<N>>(env, name, s.values, s.default);
}

/**
 * The table's `below` rule for `name` (settings.ts): undefined while `value` is less than `limit`, the
 * other setting's value, else one message naming both, as `names` calls them (the variables by
 * default; a policy file's fields, the chart's values).
 */
export function belowProblem(
  name: BelowName,
  value: number,
  limit: number,
  names: { value: string; limit: string } = { value: name, limit: SETTINGS[name].below.setting },
): string | undefined {
  if (value < limit) return undefined;
  return `${names.value} must be less than ${names.limit} (${SETTINGS[name].below.why}), got ${value} and ${limit}`;
}

/** The table's `below` rule for a variable read at boot: a ConfigError naming both when it fails. */
export function requireBelow(name: BelowName, value: number, limit: number): void {
  const problem = belowProblem(name, value, limit);
  if (problem) throw new ConfigError(problem);
}

export type LogLevel = EnumValue<'LOG_LEVEL'>;

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
   * answer (lib/common/drain.ts), so that load balancers let go of it; part of the grace period, so less
   * than it (a drain that outlasts the grace would end every shutdown in exit 1).
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
  const shutdownGraceMs = intSetting(env, 'SHUTDOWN_GRACE_MS');
  const shutdownDelayMs = intSetting(env, 'SHUTDOWN_DELAY_MS');
  requireBelow('SHUTDOWN_DELAY_MS', shutdownDelayMs, shutdownGraceMs);
  return {
    host: stringSetting(env, 'HOST'),
    logLevel: enumSetting(env, 'LOG_LEVEL'),
    trustedProxyHops: intSetting(env, 'TRUSTED_PROXY_HOPS'),
    clientIpv6PrefixLength: intSetting(env, 'CLIENT_IPV6_PREFIX_LENGTH'),
    shutdownGraceMs,
    shutdownDelayMs,
    traceSampleRatio: numberSetting(env, 'TRACE_SAMPLE_RATIO'),
    redisTarget: redisTargetVar(env),
    redis: {
      commandTimeoutMs: intSetting(env, 'REDIS_COMMAND_TIMEOUT_MS'),
      socketTimeoutMs: intSetting(env, 'REDIS_SOCKET_TIMEOUT_MS'),
      connectTimeoutMs: intSetting(env, 'REDIS_CONNECT_TIMEOUT_MS'),
      keyPrefix: stringSetting(env, 'REDIS_KEY_PREFIX'),
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
