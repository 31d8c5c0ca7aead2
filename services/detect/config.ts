// The detect service's part of the configuration: what an upload may cost (read by detect and by the
// published contract, which documents the limits), and how images are scored (read only by a process
// that loads the model: the JPEG_DECODER check may load the native addon).

import {
  ConfigError,
  type CoreConfig,
  type Env,
  enumVar,
  intVar,
  loadCoreConfig,
  optionalVar,
  portVar,
} from '../common/config.ts';
import { DEFAULT_MAX_FILE_BYTES, FRAMING_BYTES } from '../common/http-limits.ts';
import {
  ENSEMBLE_JOIN,
  MODEL_NAMES,
  type ModelChoice,
  type ModelName,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../policy/model-catalogue.ts';
import { loadPolicyConfig, type PolicyConfig } from '../policy/policy-config.ts';
import { JPEG_DECODERS, type JpegDecoderChoice, libjpegUnavailable } from './image/libjpeg/jpeg-tensor.ts';
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
  /** A scoring worker holding one image longer than this is terminated and replaced (5001, uncharged). */
  scoringDeadlineMs: number;
  /** JPEG_DECODER: the libjpeg fast path (`auto`: where it was built), or sharp for every JPEG. */
  jpegDecoder: JpegDecoderChoice;
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
const PROCESS_RESERVE_BYTES = 448 * MiB;

/**
 * DECODE_MEMORY_BUDGET_BYTES, or — in a container whose memory limit the orchestrator passes as
 * CONTAINER_MEMORY_LIMIT_BYTES (the chart does, from the downward API) — what that limit leaves after
 * the uploads in progress and the process's own reserve; otherwise 640 MiB, which with the default
 * upload bound fits the chart's default 1536 MiB limit.
 */
function decodeBytesVar(env: Env, uploadBytes: number): number {
  if (optionalVar(env, 'DECODE_MEMORY_BUDGET_BYTES') !== undefined)
    return intVar(env, 'DECODE_MEMORY_BUDGET_BYTES', 0, 16 * MiB);
  if (optionalVar(env, 'CONTAINER_MEMORY_LIMIT_BYTES') === undefined) return 640 * MiB;
  const limit = intVar(env, 'CONTAINER_MEMORY_LIMIT_BYTES', 0, 1);
  const budget = limit - uploadBytes - PROCESS_RESERVE_BYTES;
  if (budget < 64 * MiB) {
    throw new ConfigError(
      `CONTAINER_MEMORY_LIMIT_BYTES (${limit}) leaves ${Math.max(0, budget)} bytes for decoding after MAX_UPLOAD_BYTES_IN_PROGRESS (${uploadBytes}) and the process's own ${PROCESS_RESERVE_BYTES}: raise the memory limit, lower MAX_UPLOAD_BYTES_IN_PROGRESS, or set DECODE_MEMORY_BUDGET_BYTES`,
    );
  }
  return budget;
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
  // 8 full uploads (50 MiB + multipart framing): the memory figure README gives (8 concurrent
  // 50 MB uploads) stays the worst case.
  const uploadBytes = intVar(
    env,
    'MAX_UPLOAD_BYTES_IN_PROGRESS',
    8 * (DEFAULT_MAX_FILE_BYTES + FRAMING_BYTES),
    1,
  );
  return {
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
    concurrency: {
      // Handed to the scoring pool at once: up to three per worker decode or infer (scoring-pool.ts),
      // the rest wait there, bodies read. Measured through HTTP at concurrency 8 in alternating pairs: 6
      // beat 4 by ~11 % (3 of 3 pairs), 8 beat 6 by ~10 % (7 of 8 pairs).
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
  };
}

/** JPEG_DECODER; `libjpeg` (the fast path required) fails here when the addon was not built. */
function jpegDecoderVar(env: Env): JpegDecoderChoice {
  const choice = enumVar(env, 'JPEG_DECODER', JPEG_DECODERS, 'auto');
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
  const unshipped = enumVar(env, 'ALLOW_UNSHIPPED_MODELS', ['true', 'false'], 'false') === 'true';
  const raw = optionalVar(env, 'MODEL');
  const offered = unshipped ? MODEL_NAMES : OFFERED_MODEL_NAMES;
  const notOffered = raw
    ?.split(ENSEMBLE_JOIN)
    .find((m) => (MODEL_NAMES as readonly string[]).includes(m) && !offered.includes(m as ModelName));
  if (notOffered !== undefined) {
    throw new ConfigError(
      `MODEL=${raw} is not offered: ${raw === notOffered ? 'it' : notOffered} missed its fidelity bound (README, "Quantised model"); use one of ${OFFERED_MODEL_NAMES.join(', ')}`,
    );
  }
  if (raw?.includes(ENSEMBLE_JOIN)) {
    const problem = modelChoiceProblem(raw, offered);
    if (problem) {
      throw new ConfigError(`MODEL=${raw}: an ensemble joins offered models with +, but ${problem}`);
    }
    return raw as ModelChoice;
  }
  return enumVar(env, 'MODEL', offered, 'mobilenet_v2');
}

export function loadScoringConfig(env: Env): ScoringConfig {
  return {
    model: modelVar(env),
    // One per core.
    scoringWorkers: intVar(env, 'SCORING_WORKERS', 2, 1, 64),
    // For an image alone in the pool: two threads cut one inference (~8.5 → ~5.5 ms for mobilenet_v2
    // on 2 cores). Under load each image uses one thread (see scorer-worker.ts).
    inferenceThreads: intVar(env, 'INFERENCE_THREADS', 2, 1, 64),
    // The slowest legitimate images (a 200 MP JPEG shrunk on load, a 36 MP 16-bit PNG) take ~1-3 s of
    // CPU; with three images per worker and both cores busy, well under 10 s of wall time.
    scoringDeadlineMs: intVar(env, 'SCORING_DEADLINE_MS', 15_000, 100, 600_000),
    jpegDecoder: jpegDecoderVar(env),
  };
}

function edgeSecretVar(env: Env): string | undefined {
  const raw = optionalVar(env, 'EDGE_SECRET');
  if (raw !== undefined && raw.length < 16)
    throw new ConfigError(`EDGE_SECRET must be at least 16 characters, got ${raw.length}`);
  return raw;
}

export function loadDetectConfig(env: Env): DetectConfig {
  return {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    ...loadUploadConfig(env),
    ...loadScoringConfig(env),
    detectPort: portVar(env, 'DETECT_PORT', 8082),
    edgeSecret: edgeSecretVar(env),
  };
}
