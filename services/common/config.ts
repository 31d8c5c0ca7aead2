// Configuration is read from the environment once, validated, and frozen. A bad value stops the
// process at boot with a message naming the variable, instead of failing on some later request.

import { isAbsolute, resolve } from 'node:path';
import {
  JPEG_DECODERS,
  type JpegDecoderChoice,
  libjpegUnavailable,
} from '../detect/image/libjpeg/jpeg-tensor.ts';
import { MODEL_NAMES, type ModelName, OFFERED_MODEL_NAMES } from '../detect/model/classifier.ts';
import type { AccountTier } from './account-tier.ts';
import { type RedisTarget, redisTargetVar } from './redis-target.ts';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

type Env = Record<string, string | undefined>;

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

/** JPEG_DECODER; `libjpeg` (the fast path required) fails here when the addon was not built. */
function jpegDecoderVar(env: Env): JpegDecoderChoice {
  const choice = enumVar(env, 'JPEG_DECODER', JPEG_DECODERS, 'auto');
  const missing = choice === 'libjpeg' ? libjpegUnavailable() : undefined;
  if (missing) throw new ConfigError(`JPEG_DECODER=libjpeg, but ${missing}`);
  return choice;
}

/**
 * MODEL: one of the offered models. A model that missed its bound (the quantised one, see
 * classifier.ts) is refused with the reason, unless ALLOW_UNSHIPPED_MODELS=true (the benchmark's switch).
 */
function modelVar(env: Env): ModelName {
  const unshipped = enumVar(env, 'ALLOW_UNSHIPPED_MODELS', ['true', 'false'], 'false') === 'true';
  const raw = read(env, 'MODEL');
  if (
    !unshipped &&
    raw !== undefined &&
    (MODEL_NAMES as readonly string[]).includes(raw) &&
    !OFFERED_MODEL_NAMES.includes(raw as ModelName)
  ) {
    throw new ConfigError(
      `MODEL=${raw} is not offered: it missed its fidelity bound (README, "Quantised model"); use one of ${OFFERED_MODEL_NAMES.join(', ')}`,
    );
  }
  return enumVar(env, 'MODEL', unshipped ? MODEL_NAMES : OFFERED_MODEL_NAMES, 'mobilenet_v2');
}

export interface WindowLimits {
  perMinute: number;
  perDay: number;
}

export interface Config {
  port: number;
  host: string;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  model: ModelName;
  thresholds: { allow: number; block: number };
  maxFileBytes: number;
  /** An upload idle this long is refused with 4001 (a stalled client must not hold a slot). */
  uploadIdleTimeoutMs: number;
  /** An upload averaging less than this (bytes/s) once the grace period is over is refused with 4001. */
  uploadMinBytesPerSecond: number;
  uploadMinRateGraceMs: number;
  limits: {
    jpeg: { maxEdge: number; maxPixels: number };
    other: { maxEdge: number; maxPixels: number };
  };
  anonymous: WindowLimits;
  /**
   * `active`: images in decode + inference at once (the scoring slots, taken only once the upload is
   * read). `uploads`: detect requests in progress at once — uploading, waiting for a scoring slot or
   * scored — in total and per client (anonymous: IP; key endpoint: account); `uploadBytes`: the image
   * bytes they may hold together. Past any of them: 503/5001 with Retry-After, never charged.
   */
  concurrency: {
    active: number;
    uploads: number;
    uploadsPerClient: number;
    uploadBytes: number;
    /** Decoding memory of the images being scored at once (see decodeBytesVar). */
    decodeBytes: number;
    retryAfterSeconds: number;
  };
  /** Scoring worker threads (one ONNX session each); the active images are spread over them. */
  scoringWorkers: number;
  /** ONNX Runtime intra-op threads for an image alone in the pool. */
  inferenceThreads: number;
  /** A scoring worker holding one image longer than this is terminated and replaced (5001, uncharged). */
  scoringDeadlineMs: number;
  /** JPEG_DECODER: the libjpeg fast path (`auto`: where it was built), or sharp for every JPEG. */
  jpegDecoder: JpegDecoderChoice;
  /** How many X-Forwarded-For hops the trusted edge adds (0 = use the socket address). */
  trustedProxyHops: number;
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
  /** Per-account quotas by tier (spec 8; free per minute: DESIGN, configurable). */
  tiers: Record<AccountTier, WindowLimits>;
  /** Embedded account store (no REDIS_URL): absolute path of the JSON file. */
  accountsFile: string;
  /** The mounted policy file the operator renders (DetectionPolicy); watched, applied per request. */
  policyFile: string | undefined;
  /** Port of the quota service's own server (ext_authz + console), when run on its own. */
  quotaPort: number;
  /** Ports of the detect and health services' own servers (cluster mode). */
  detectPort: number;
  healthPort: number;
  /**
   * Cluster mode: when set, the detect server takes a request's identity headers only together with
   * `x-edge-secret` carrying this value (Envoy adds it); the NetworkPolicy is the first guard.
   */
  edgeSecret: string | undefined;
}

const MiB = 1024 * 1024;

/**
 * What the process takes besides images: the runtime, the scoring workers' sessions and heaps, the
 * libvips and ORT arenas (measured ~280 MiB at rest with two workers; bench/run.ts prints it), with room.
 */
const PROCESS_RESERVE_BYTES = 448 * MiB;

/**
 * DECODE_MEMORY_BUDGET_BYTES, or — in a container whose memory limit the orchestrator passes as
 * CONTAINER_MEMORY_LIMIT_BYTES (the chart does, from the downward API) — what that limit leaves after
 * the uploads in progress and the process's own reserve; otherwise 640 MiB, which with the default
 * upload bound fits the chart's default 1536 MiB limit.
 */
function decodeBytesVar(env: Env, uploadBytes: number): number {
  if (read(env, 'DECODE_MEMORY_BUDGET_BYTES') !== undefined)
    return intVar(env, 'DECODE_MEMORY_BUDGET_BYTES', 0, 16 * MiB);
  if (read(env, 'CONTAINER_MEMORY_LIMIT_BYTES') === undefined) return 640 * MiB;
  const limit = intVar(env, 'CONTAINER_MEMORY_LIMIT_BYTES', 0, 1);
  const budget = limit - uploadBytes - PROCESS_RESERVE_BYTES;
  if (budget < 64 * MiB) {
    throw new ConfigError(
      `CONTAINER_MEMORY_LIMIT_BYTES (${limit}) leaves ${Math.max(0, budget)} bytes for decoding after MAX_UPLOAD_BYTES_IN_PROGRESS (${uploadBytes}) and the process's own ${PROCESS_RESERVE_BYTES}: raise the memory limit, lower MAX_UPLOAD_BYTES_IN_PROGRESS, or set DECODE_MEMORY_BUDGET_BYTES`,
    );
  }
  return budget;
}

function edgeSecretVar(env: Env): string | undefined {
  const raw = optionalVar(env, 'EDGE_SECRET');
  if (raw !== undefined && raw.length < 16)
    throw new ConfigError(`EDGE_SECRET must be at least 16 characters, got ${raw.length}`);
  return raw;
}

/** Variables that no longer exist, with what replaced them: an operator's old setting would otherwise
 * be ignored without a word. */
const RETIRED: Record<string, string> = {
  MAX_QUEUED_IMAGES:
    'requests in progress are bounded by MAX_UPLOADS, MAX_UPLOADS_PER_CLIENT and MAX_UPLOAD_BYTES_IN_PROGRESS',
};

export function loadConfig(env: Env = process.env): Config {
  for (const [name, instead] of Object.entries(RETIRED))
    if (read(env, name) !== undefined) throw new ConfigError(`${name} no longer exists: ${instead}`);
  const allow = numberVar(env, 'THRESHOLD_ALLOW', 0.1, 0, 1);
  const block = numberVar(env, 'THRESHOLD_BLOCK', 0.9, 0, 1);
  if (allow > block)
    throw new ConfigError(`THRESHOLD_ALLOW (${allow}) must not exceed THRESHOLD_BLOCK (${block})`);
  // 8 full uploads (50 MiB + multipart framing): the memory figure README gives (8 concurrent
  // 50 MB uploads) stays the worst case.
  const uploadBytes = intVar(env, 'MAX_UPLOAD_BYTES_IN_PROGRESS', 8 * (52_428_800 + 1_048_576), 1);
  const config: Config = {
    port: intVar(env, 'PORT', 8080, 0, 65535),
    host: stringVar(env, 'HOST', '0.0.0.0'),
    logLevel: enumVar(
      env,
      'LOG_LEVEL',
      ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
      'info',
    ),
    model: modelVar(env),
    thresholds: { allow, block },
    maxFileBytes: intVar(env, 'MAX_FILE_BYTES', 52_428_800, 1),
    uploadIdleTimeoutMs: intVar(env, 'UPLOAD_IDLE_TIMEOUT_MS', 30_000, 100),
    // 8 KiB/s is 64 kbit/s: slower than any phone link still in use, a thousand times what a trickling
    // attacker needs to send to hold a connection open.
    uploadMinBytesPerSecond: intVar(env, 'UPLOAD_MIN_BYTES_PER_SECOND', 8192, 0),
    uploadMinRateGraceMs: intVar(env, 'UPLOAD_MIN_RATE_GRACE_MS', 10_000, 0),
    limits: {
      jpeg: {
        maxEdge: intVar(env, 'JPEG_MAX_EDGE', 30_000, 1),
        maxPixels: intVar(env, 'JPEG_MAX_PIXELS', 200_000_000, 1),
      },
      other: {
        maxEdge: intVar(env, 'OTHER_MAX_EDGE', 8192, 1),
        maxPixels: intVar(env, 'OTHER_MAX_PIXELS', 36_000_000, 1),
      },
    },
    anonymous: {
      perMinute: intVar(env, 'ANON_PER_MINUTE', 10, 0),
      perDay: intVar(env, 'ANON_PER_DAY', 30, 0),
    },
    concurrency: {
      // Handed to the scoring pool at once: up to three per worker decode or infer (load.ts), the rest
      // wait there, bodies read. Measured through HTTP at concurrency 8 in alternating pairs: 6 beat 4
      // by ~11 % (3 of 3 pairs), 8 beat 6 by ~10 % (7 of 8 pairs).
      active: intVar(env, 'MAX_ACTIVE_IMAGES', 8, 1, 256),
      // Requests in progress cost a socket and their bytes (bounded below), not CPU: many may upload
      // at once, and a few clients cannot take them all. Per client, 16 is above the default per-minute
      // limits (anonymous and free: 10), so a burst within its allowance never meets this bound.
      uploads: intVar(env, 'MAX_UPLOADS', 64, 1, 100_000),
      uploadsPerClient: intVar(env, 'MAX_UPLOADS_PER_CLIENT', 16, 1, 100_000),
      uploadBytes,
      decodeBytes: decodeBytesVar(env, uploadBytes),
      retryAfterSeconds: intVar(env, 'OVERLOAD_RETRY_AFTER_SECONDS', 1, 1, 3600),
    },
    // One per core.
    scoringWorkers: intVar(env, 'SCORING_WORKERS', 2, 1, 64),
    // For an image alone in the pool: two threads cut one inference (~8.5 → ~5.5 ms for mobilenet_v2
    // on 2 cores). Under load each image uses one thread (see scorer-worker.ts).
    inferenceThreads: intVar(env, 'INFERENCE_THREADS', 2, 1, 64),
    // The slowest legitimate images (a 200 MP JPEG shrunk on load, a 36 MP 16-bit PNG) take ~1-3 s of
    // CPU; with three images per worker and both cores busy, well under 10 s of wall time.
    scoringDeadlineMs: intVar(env, 'SCORING_DEADLINE_MS', 15_000, 100, 600_000),
    jpegDecoder: jpegDecoderVar(env),
    trustedProxyHops: intVar(env, 'TRUSTED_PROXY_HOPS', 0, 0, 10),
    shutdownGraceMs: intVar(env, 'SHUTDOWN_GRACE_MS', 25_000, 0),
    shutdownDelayMs: intVar(env, 'SHUTDOWN_DELAY_MS', 0, 0, 60_000),
    traceSampleRatio: numberVar(env, 'TRACE_SAMPLE_RATIO', 1, 0, 1),
    redisTarget: redisTargetVar(env),
    redis: {
      commandTimeoutMs: intVar(env, 'REDIS_COMMAND_TIMEOUT_MS', 100, 1, 60_000),
      socketTimeoutMs: intVar(env, 'REDIS_SOCKET_TIMEOUT_MS', 1000, 1, 600_000),
      connectTimeoutMs: intVar(env, 'REDIS_CONNECT_TIMEOUT_MS', 1000, 1, 60_000),
      keyPrefix: stringVar(env, 'REDIS_KEY_PREFIX', 'nsfwd:'),
    },
    tiers: {
      free: {
        perMinute: intVar(env, 'FREE_PER_MINUTE', 10, 0),
        perDay: intVar(env, 'FREE_PER_DAY', 100, 0),
      },
      pro: {
        perMinute: intVar(env, 'PRO_PER_MINUTE', 30, 0),
        perDay: intVar(env, 'PRO_PER_DAY', 10_000, 0),
      },
    },
    accountsFile: pathVar(env, 'ACCOUNTS_FILE', '.data/accounts.json'),
    policyFile: optionalVar(env, 'POLICY_FILE'),
    quotaPort: intVar(env, 'QUOTA_PORT', 8081, 0, 65535),
    detectPort: intVar(env, 'DETECT_PORT', 8082, 0, 65535),
    healthPort: intVar(env, 'HEALTH_PORT', 8083, 0, 65535),
    edgeSecret: edgeSecretVar(env),
  };
  return Object.freeze(config);
}

/**
 * A thin server's first step: the validated configuration, or — for a bad value — one line naming the
 * variable on stderr and exit code 2, before anything else starts.
 */
export function loadConfigOrExit(who: string, env: Env = process.env): Config {
  try {
    return loadConfig(env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`${who}: invalid configuration: ${err.message}`);
    process.exit(2);
  }
}
