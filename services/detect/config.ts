// The detect service's part of the configuration: what an upload may cost (read by detect and by the
// published contract, which documents the limits), and how images are scored (read only by a process
// that loads the model: the JPEG_DECODER check may load the native addon).

import {
  ConfigError,
  type CoreConfig,
  type Env,
  enumSetting,
  enumVar,
  intSetting,
  loadCoreConfig,
  optionalIntSetting,
  optionalStringSetting,
  optionalVar,
} from '../../lib/common/config.ts';
import { DEFAULT_MAX_FILE_BYTES } from '../../lib/common/http-limits.ts';
import {
  ENSEMBLE_JOIN,
  MODEL_NAMES,
  type ModelChoice,
  type ModelName,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../../lib/common/model-catalogue.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';
import { type HashListConfig, loadHashListConfig } from './hash-lists.ts';
import { worstJpegDecodeBytes } from './image/image-cost.ts';
import { type JpegDecoderChoice, libjpegUnavailable } from './image/libjpeg/jpeg-tensor.ts';
import type { WorkGateOptions } from './work-gate.ts';

export interface UploadConfig {
  /** An upload idle this long is refused with 4001 (a stalled client must not hold a slot). */
  uploadIdleTimeoutMs: number;
  /** An upload averaging less than this (bytes/s) once the grace period is over is refused with 4001. */
  uploadMinBytesPerSecond: number;
  uploadMinRateGraceMs: number;
  limits: {
    jpeg: { maxEdge: number; maxPixels: number };
    other: { maxEdge: number; maxPixels: number };
  };
  /**
   * `active`: images in decode + inference at once (the scoring slots, taken only once the upload is
   * read). `uploads`: detect requests in progress at once — uploading, waiting for a scoring slot or
   * scored — in total and per client (anonymous: IP; key endpoint: account); `uploadBytes`: the image
   * bytes they may hold together. Past any of them: 503/5001 with Retry-After, never charged.
   */
  concurrency: WorkGateOptions;
}

export interface ScoringConfig {
  model: ModelChoice;
  /** Scoring worker threads (one ONNX session each); the active images are spread over them. */
  scoringWorkers: number;
  /** ONNX Runtime intra-op threads for an image alone in the pool. */
  inferenceThreads: number;
  /**
   * A decoder process holding one image longer than this (wall time) is killed and replaced: 4005,
   * charged; an image predicted to need more CPU than this is refused before any work (4005).
   */
  scoringDeadlineMs: number;
  /** Decoder processes at most (one image each at a time, no model; decoder-pool.ts). */
  decoderProcesses: number;
  /** A decoder process idle this long ends. */
  decoderIdleMs: number;
  /** Ordinary images up to this many pixels are decoded in the scoring worker threads (decode-route.ts). */
  inProcessMaxPixels: number;
  /** CPU time one image's decode may take at most before its decoder is killed: 4005, charged. */
  decodeCpuLimitMs: number;
  /** MAX_TILES: tiles a long frame is scored as, at most. */
  maxTiles: number;
  /** MAX_FRAMES_SCORED: frames of an animation (pages of a TIFF) scored, at most; 1: the first only. */
  maxFramesScored: number;
  /** JPEG_DECODER: the libjpeg fast path (`auto`: where it was built), or sharp for every JPEG. */
  jpegDecoder: JpegDecoderChoice;
  /** The known-bad hash lists matched against each image's PDQ (hash-lists.ts). */
  hashLists: HashListConfig;
}

/** The detect server's own configuration (cluster mode). */
export interface DetectConfig extends CoreConfig, PolicyConfig, UploadConfig, ScoringConfig {
  detectPort: number;
  /**
   * When set, the detect server takes a request's identity headers only together with `x-edge-secret`
   * carrying this value (Envoy adds it); the NetworkPolicy is the first guard.
   */
  edgeSecret: string | undefined;
}

const MiB = 1024 * 1024;

/**
 * What the process takes besides images: the runtime, the scoring workers' sessions and heaps, the
 * libvips and ORT arenas (measured ~280 MiB at rest with two workers; bench/run.ts prints it), with room.
 */
export const PROCESS_RESERVE_BYTES = 448 * MiB;

/**
 * DECODE_MEMORY_BUDGET_BYTES, or — in a container whose memory limit the orchestrator passes as
 * CONTAINER_MEMORY_LIMIT_BYTES (the chart does, from the downward API) — what that limit leaves after
 * the uploads in progress and the process's own reserve; otherwise what the worst image within the
 * JPEG limits may take to decode (~1.7 GiB at the spec's limits: image-cost.ts), so that every image
 * the limits allow can be admitted, alone if need be. The chart's default memory limit leaves at least
 * that (docs/image-cost.md).
 */
function decodeBytesVar(
  env: Env,
  uploadBytes: number,
  jpegLimits: { maxEdge: number; maxPixels: number },
): number {
  const budget = optionalIntSetting(env, 'DECODE_MEMORY_BUDGET_BYTES');
  if (budget !== undefined) return budget;
  const limit = optionalIntSetting(env, 'CONTAINER_MEMORY_LIMIT_BYTES');
  if (limit === undefined)
    return Math.ceil(worstJpegDecodeBytes(jpegLimits, DEFAULT_MAX_FILE_BYTES) / MiB) * MiB;
  const left = limit - uploadBytes - PROCESS_RESERVE_BYTES;
  if (left < 64 * MiB) {
    throw new ConfigError(
      `CONTAINER_MEMORY_LIMIT_BYTES (${limit}) leaves ${Math.max(0, left)} bytes for decoding after MAX_UPLOAD_BYTES_IN_PROGRESS (${uploadBytes}) and the process's own ${PROCESS_RESERVE_BYTES}: raise the memory limit, lower MAX_UPLOAD_BYTES_IN_PROGRESS, or set DECODE_MEMORY_BUDGET_BYTES`,
    );
  }
  return left;
}

/** Variables that no longer exist, with what replaced them: an operator's old setting would otherwise
 * be ignored without a word. */
const RETIRED: Record<string, string> = {
  MAX_QUEUED_IMAGES:
    'requests in progress are bounded by MAX_UPLOADS, MAX_UPLOADS_PER_CLIENT and MAX_UPLOAD_BYTES_IN_PROGRESS',
};

export function loadUploadConfig(env: Env): UploadConfig {
  for (const [name, instead] of Object.entries(RETIRED))
    if (optionalVar(env, name) !== undefined) throw new ConfigError(`${name} no longer exists: ${instead}`);
  const uploadBytes = intSetting(env, 'MAX_UPLOAD_BYTES_IN_PROGRESS');
  const limits = {
    jpeg: {
      maxEdge: intSetting(env, 'JPEG_MAX_EDGE'),
      maxPixels: intSetting(env, 'JPEG_MAX_PIXELS'),
    },
    other: {
      maxEdge: intSetting(env, 'OTHER_MAX_EDGE'),
      maxPixels: intSetting(env, 'OTHER_MAX_PIXELS'),
    },
  };
  return {
    uploadIdleTimeoutMs: intSetting(env, 'UPLOAD_IDLE_TIMEOUT_MS'),
    uploadMinBytesPerSecond: intSetting(env, 'UPLOAD_MIN_BYTES_PER_SECOND'),
    uploadMinRateGraceMs: intSetting(env, 'UPLOAD_MIN_RATE_GRACE_MS'),
    limits,
    concurrency: {
      // Handed to the scoring pool at once: up to three per worker decode or infer (scoring-pool.ts),
      // the rest wait there, bodies read. Measured through HTTP at concurrency 8 in alternating pairs: 6
      // beat 4 by ~11 % (3 of 3 pairs), 8 beat 6 by ~10 % (7 of 8 pairs).
      active: intSetting(env, 'MAX_ACTIVE_IMAGES'),
      // Requests in progress cost a socket and their bytes (bounded below), not CPU: many may upload
      // at once, and a few clients cannot take them all. Per client, 16 is above the default per-minute
      // limits (anonymous and free: 10), so a burst within its allowance never meets this bound.
      uploads: intSetting(env, 'MAX_UPLOADS'),
      uploadsPerClient: intSetting(env, 'MAX_UPLOADS_PER_CLIENT'),
      uploadBytes,
      decodeBytes: decodeBytesVar(env, uploadBytes, limits.jpeg),
      retryAfterSeconds: intSetting(env, 'OVERLOAD_RETRY_AFTER_SECONDS'),
    },
  };
}

/** JPEG_DECODER; `libjpeg` (the fast path required) fails here when the addon was not built. */
function jpegDecoderVar(env: Env): JpegDecoderChoice {
  const choice = enumSetting(env, 'JPEG_DECODER');
  const missing = choice === 'libjpeg' ? libjpegUnavailable() : undefined;
  if (missing) throw new ConfigError(`JPEG_DECODER=libjpeg, but ${missing}`);
  return choice;
}

/**
 * MODEL: one of the offered models, or an ensemble of them joined by `+` (model-catalogue.ts). A model
 * that missed its bound (the quantised one, see model-catalogue.ts) is refused with the reason, unless
 * ALLOW_UNSHIPPED_MODELS=true (the benchmark's switch).
 */
function modelVar(env: Env): ModelChoice {
  const unshipped = enumSetting(env, 'ALLOW_UNSHIPPED_MODELS') === 'true';
  const raw = optionalVar(env, 'MODEL');
  const offered = unshipped ? MODEL_NAMES : OFFERED_MODEL_NAMES;
  const notOffered = raw
    ?.split(ENSEMBLE_JOIN)
    .find((m) => (MODEL_NAMES as readonly string[]).includes(m) && !offered.includes(m as ModelName));
  if (notOffered !== undefined) {
    throw new ConfigError(
      `MODEL=${raw} is not offered: ${raw === notOffered ? 'it' : notOffered} missed its fidelity bound (docs/quantised-model.md); use one of ${OFFERED_MODEL_NAMES.join(', ')}`,
    );
  }
  if (raw?.includes(ENSEMBLE_JOIN)) {
    const problem = modelChoiceProblem(raw, offered);
    if (problem) {
      throw new ConfigError(`MODEL=${raw}: an ensemble joins offered models with +, but ${problem}`);
    }
    return raw as ModelChoice;
  }
  return enumVar(env, 'MODEL', offered, SETTINGS.MODEL.default satisfies ModelName);
}

export function loadScoringConfig(env: Env): ScoringConfig {
  return {
    model: modelVar(env),
    // One per core.
    scoringWorkers: intSetting(env, 'SCORING_WORKERS'),
    // For an image alone in the pool: two threads cut one inference (~8.5 → ~5.5 ms for mobilenet_v2
    // on 2 cores). Under load each image uses one thread (see scorer-worker.ts).
    inferenceThreads: intSetting(env, 'INFERENCE_THREADS'),
    scoringDeadlineMs: intSetting(env, 'SCORING_DEADLINE_MS'),
    decoderProcesses: intSetting(env, 'DECODER_PROCESSES'),
    decoderIdleMs: intSetting(env, 'DECODER_IDLE_MS'),
    inProcessMaxPixels: intSetting(env, 'IN_PROCESS_MAX_PIXELS'),
    decodeCpuLimitMs: intSetting(env, 'DECODE_CPU_LIMIT_MS'),
    maxTiles: intSetting(env, 'MAX_TILES'),
    maxFramesScored: intSetting(env, 'MAX_FRAMES_SCORED'),
    jpegDecoder: jpegDecoderVar(env),
    hashLists: loadHashListConfig(env),
  };
}

function edgeSecretVar(env: Env): string | undefined {
  const raw = optionalStringSetting(env, 'EDGE_SECRET');
  const { minLength } = SETTINGS.EDGE_SECRET;
  if (raw !== undefined && raw.length < minLength)
    throw new ConfigError(`EDGE_SECRET must be at least ${minLength} characters, got ${raw.length}`);
  return raw;
}

export function loadDetectConfig(env: Env): DetectConfig {
  const config: DetectConfig = {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    ...loadUploadConfig(env),
    ...loadScoringConfig(env),
    detectPort: intSetting(env, 'DETECT_PORT'),
    edgeSecret: edgeSecretVar(env),
  };
  if (config.hashLists.from === 'redis' && !config.redisTarget)
    throw new ConfigError(
      'HASH_LISTS_FROM=redis needs REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES: the operator publishes the lists there',
    );
  return config;
}
