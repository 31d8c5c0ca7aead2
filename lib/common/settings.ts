// Every setting of every process, declared once: its variable, type, default, range, unit, who reads it,
// its chart value and DetectionPolicy field, and one line of documentation. The readers
// (services/*/config.ts) take default and range from here; the chart's `config:` block, its schema,
// the pods' environment, the CRD's ranges and docs/configuration.md are generated from here
// (`npm run settings`; `npm run settings -- --check` fails on drift, and a test runs it).
// A leaf: types and data only.

import { DEFAULT_MAX_FILE_BYTES, FRAMING_BYTES } from './http-limits.ts';
import { formatNames, formatsLimitedBy } from './image-formats.ts';
import { MODELS, OFFERED_MODEL_NAMES } from './model-catalogue.ts';

export type Process = 'detect' | 'quota' | 'health' | 'all-in-one' | 'operator' | 'admin' | 'calibrate';

/** The processes that read the core (lib/common/config.ts). */
const EVERY: readonly Process[] = ['detect', 'quota', 'health', 'all-in-one', 'operator', 'admin'];
/** The processes that decide or count (lib/policy/policy-config.ts). */
const POLICY: readonly Process[] = ['detect', 'quota', 'health', 'all-in-one', 'admin', 'calibrate'];
/** The processes that read uploads (services/detect/config.ts, loadUploadConfig). */
const UPLOADS: readonly Process[] = ['detect', 'all-in-one', 'calibrate'];
/** The processes that score images (loadScoringConfig). */
const SCORING: readonly Process[] = ['detect', 'all-in-one', 'calibrate'];

export type Section = 'policy' | 'uploads' | 'scoring' | 'core' | 'redis' | 'ports' | 'operator';

interface Common {
  section: Section;
  readBy: readonly Process[];
  /** One line of documentation (Markdown). */
  doc: string;
  unit?: 'bytes' | 'ms' | 's' | 'requests' | 'px' | 'pixels' | 'probability' | 'bytes/s';
  /**
   * The chart's value under `config:` that sets it (values.yaml, values.schema.json, the pods' env). With
   * `default`: the chart's own default, where a cluster wants another than the process's; with
   * `env: false`: the template passes it itself (a condition or a derivation).
   */
  chart?: { key: string; default?: number | string; env?: false };
  /** The DetectionPolicy's `spec` field that overrides it while a policy is in force. */
  crd?: string;
}

/**
 * A numeric setting that must be less than another of its kind, for the reason given: a range cannot say
 * it, so its reader refuses it at boot (lib/common/config.ts, belowProblem) and the chart at render (a
 * `fail` generated from this).
 */
interface Below {
  below?: { setting: string; why: string };
}

export interface IntegerSetting extends Common, Below {
  type: 'integer';
  /** undefined: unset by default (the documentation says what applies then). */
  default: number | undefined;
  min: number;
  max?: number;
}

export interface NumberSetting extends Common, Below {
  type: 'number';
  default: number;
  min: number;
  max: number;
}

export interface StringSetting extends Common {
  type: 'string';
  default: string | undefined;
  /** The value must match it (the chart's schema checks it too). */
  pattern?: string;
  /** The value must be at least this long. */
  minLength?: number;
  /** Shown in the documentation instead of the default when that is computed (host name + pid, …). */
  defaultDoc?: string;
}

export interface EnumSetting extends Common {
  type: 'enum';
  default: string;
  values: readonly string[];
}

/** A model name: one of model-catalogue.ts's offered models, or an ensemble of them. */
export interface ModelSetting extends Common {
  type: 'model';
  default: string;
}

export type Setting = IntegerSetting | NumberSetting | StringSetting | EnumSetting | ModelSetting;

const MiB = 1024 * 1024;

/** A request quota of the policy (spec 8): a count per window, its chart value and CRD field. */
const requestLimit = <K extends string, C extends string>(
  defaultCount: number,
  key: K,
  crd: C,
  doc: string,
) =>
  ({
    section: 'policy',
    type: 'integer',
    default: defaultCount,
    min: 0,
    unit: 'requests',
    readBy: POLICY,
    chart: { key },
    crd,
    doc,
  }) as const;

export const SETTINGS = {
  // The policy: what a DetectionPolicy may override. The spec's numbers (part 8) are the defaults.
  THRESHOLD_ALLOW: {
    section: 'policy',
    type: 'number',
    default: 0.1,
    min: 0,
    max: 1,
    unit: 'probability',
    readBy: POLICY,
    chart: { key: 'thresholdAllow' },
    crd: 'thresholds.allow',
    below: { setting: 'THRESHOLD_BLOCK', why: 'the review band lies between them' },
    doc: 'Below this NSFW probability (nsfw < allow) the decision is allow; must be below THRESHOLD_BLOCK.',
  },
  THRESHOLD_BLOCK: {
    section: 'policy',
    type: 'number',
    default: 0.9,
    min: 0,
    max: 1,
    unit: 'probability',
    readBy: POLICY,
    chart: { key: 'thresholdBlock' },
    crd: 'thresholds.block',
    doc: 'At or above this NSFW probability (nsfw >= block) the decision is block.',
  },
  MODEL: {
    section: 'policy',
    type: 'model',
    default: 'mobilenet_v2',
    readBy: SCORING,
    chart: { key: 'model' },
    crd: 'model',
    doc: `The classifier: ${OFFERED_MODEL_NAMES.map((m) => `\`${m}\` (${MODELS[m].inputSize} px)`).join(', ')}, or an ensemble joined by \`+\` (\`mobilenet_v2+open_nsfw\`: the mean of the members' scores; docs/models.md). A policy that names one rolls the detect pods.`,
  },
  ALLOW_UNSHIPPED_MODELS: {
    section: 'scoring',
    type: 'enum',
    default: 'false',
    values: ['true', 'false'],
    readBy: SCORING,
    doc: '`true` lets MODEL name a model that missed its fidelity bound (`mobilenet_v2_int8`); for `npm run bench`, not for production.',
  },
  ANON_PER_MINUTE: requestLimit(
    10,
    'anonPerMinute',
    'anonymous.perMinute',
    'Anonymous requests per minute, per client IP.',
  ),
  ANON_PER_DAY: requestLimit(
    30,
    'anonPerDay',
    'anonymous.perDay',
    'Anonymous requests per UTC day, per client IP.',
  ),
  FREE_PER_MINUTE: requestLimit(
    10,
    'freePerMinute',
    'tiers.free.perMinute',
    'Free-tier requests per minute, per account (shared by its keys).',
  ),
  FREE_PER_DAY: requestLimit(
    100,
    'freePerDay',
    'tiers.free.perDay',
    'Free-tier requests per UTC day, per account (shared by its keys).',
  ),
  PRO_PER_MINUTE: requestLimit(
    30,
    'proPerMinute',
    'tiers.pro.perMinute',
    'Pro-tier requests per minute, per account (shared by its keys).',
  ),
  PRO_PER_DAY: requestLimit(
    10_000,
    'proPerDay',
    'tiers.pro.perDay',
    'Pro-tier requests per UTC day, per account (shared by its keys).',
  ),
  MAX_FILE_BYTES: {
    section: 'policy',
    type: 'integer',
    default: DEFAULT_MAX_FILE_BYTES,
    min: 1,
    unit: 'bytes',
    readBy: POLICY,
    chart: { key: 'maxFileBytes' },
    crd: 'upload.maxBytes',
    doc: 'Largest accepted image (the spec’s 50 MiB); a policy may only lower it.',
  },
  POLICY_FILE: {
    section: 'policy',
    type: 'string',
    default: undefined,
    readBy: POLICY,
    doc: 'The mounted policy file the operator renders from a DetectionPolicy; watched. The fields it states apply to the next request; the others stay as configured here.',
  },

  // Uploads (detect).
  UPLOAD_IDLE_TIMEOUT_MS: {
    section: 'uploads',
    type: 'integer',
    default: 30_000,
    min: 100,
    unit: 'ms',
    readBy: UPLOADS,
    chart: { key: 'uploadIdleTimeoutMs' },
    doc: 'An upload that sends nothing this long is refused (4001).',
  },
  UPLOAD_MIN_BYTES_PER_SECOND: {
    section: 'uploads',
    type: 'integer',
    // 64 kbit/s: slower than any phone link still in use, far above what a trickling attacker needs.
    default: 8192,
    min: 0,
    unit: 'bytes/s',
    readBy: UPLOADS,
    doc: 'An upload averaging less than this once the grace period is over is refused (4001); `0` turns it off.',
  },
  UPLOAD_MIN_RATE_GRACE_MS: {
    section: 'uploads',
    type: 'integer',
    default: 10_000,
    min: 0,
    unit: 'ms',
    readBy: UPLOADS,
    doc: 'How long an upload may run before its average rate is checked.',
  },
  JPEG_MAX_EDGE: {
    section: 'uploads',
    type: 'integer',
    default: 30_000,
    min: 1,
    unit: 'px',
    readBy: UPLOADS,
    doc: `Longest edge of a ${formatNames(formatsLimitedBy('jpeg'))} (spec 8).`,
  },
  JPEG_MAX_PIXELS: {
    section: 'uploads',
    type: 'integer',
    default: 200_000_000,
    min: 1,
    unit: 'pixels',
    readBy: UPLOADS,
    doc: `Total pixels of a ${formatNames(formatsLimitedBy('jpeg'))} (spec 8).`,
  },
  OTHER_MAX_EDGE: {
    section: 'uploads',
    type: 'integer',
    default: 8192,
    min: 1,
    unit: 'px',
    readBy: UPLOADS,
    doc: `Longest edge of a ${formatNames(formatsLimitedBy('other'))} (spec 8).`,
  },
  OTHER_MAX_PIXELS: {
    section: 'uploads',
    type: 'integer',
    default: 36_000_000,
    min: 1,
    unit: 'pixels',
    readBy: UPLOADS,
    doc: `Total pixels of a ${formatNames(formatsLimitedBy('other'))} (spec 8).`,
  },
  MAX_ACTIVE_IMAGES: {
    section: 'uploads',
    type: 'integer',
    // Measured through HTTP at concurrency 8 in alternating pairs: 6 beat 4 by ~11 %, 8 beat 6 by ~10 %.
    default: 8,
    min: 1,
    max: 256,
    readBy: UPLOADS,
    chart: { key: 'maxActiveImages' },
    doc: 'Images handed to the scoring workers at once (up to three per worker decode or infer, the rest wait, bodies read).',
  },
  MAX_UPLOADS: {
    section: 'uploads',
    type: 'integer',
    default: 64,
    min: 1,
    max: 100_000,
    unit: 'requests',
    readBy: UPLOADS,
    chart: { key: 'maxUploads' },
    doc: 'Detect requests in progress at once (uploading, waiting for a scoring slot, or scored); past it 503/5001, not charged.',
  },
  MAX_UPLOADS_PER_CLIENT: {
    section: 'uploads',
    type: 'integer',
    // Above the default per-minute limits (anonymous and free: 10): a burst within its allowance never meets it.
    default: 16,
    min: 1,
    max: 100_000,
    unit: 'requests',
    readBy: UPLOADS,
    chart: { key: 'maxUploadsPerClient' },
    doc: 'The same per client: per IP anonymous, per account with a key; past it 503/5001, not charged.',
  },
  MAX_UPLOAD_BYTES_IN_PROGRESS: {
    section: 'uploads',
    type: 'integer',
    // 8 full uploads (50 MiB + multipart framing): the worst case of the memory figures.
    default: 8 * (DEFAULT_MAX_FILE_BYTES + FRAMING_BYTES),
    min: 1,
    unit: 'bytes',
    readBy: UPLOADS,
    chart: { key: 'maxUploadBytesInProgress' },
    doc: 'Body bytes the requests in progress may hold together (8 × (50 MiB + 1 MiB framing)); an upload that would pass it is cut with 503/5001, not charged.',
  },
  DECODE_MEMORY_BUDGET_BYTES: {
    section: 'uploads',
    type: 'integer',
    default: undefined,
    min: 16 * MiB,
    unit: 'bytes',
    readBy: UPLOADS,
    doc: 'Memory the images being decoded may take together (estimated from each header). Unset: CONTAINER_MEMORY_LIMIT_BYTES − MAX_UPLOAD_BYTES_IN_PROGRESS − 448 MiB when that is set, else what the worst image within the JPEG limits may take to decode (~1.7 GiB within the spec limits; docs/image-cost.md).',
  },
  CONTAINER_MEMORY_LIMIT_BYTES: {
    section: 'uploads',
    type: 'integer',
    default: undefined,
    min: 1,
    unit: 'bytes',
    readBy: UPLOADS,
    doc: 'The container’s memory limit (the chart passes it from the downward API); sizes the decode budget when DECODE_MEMORY_BUDGET_BYTES is unset.',
  },
  OVERLOAD_RETRY_AFTER_SECONDS: {
    section: 'uploads',
    type: 'integer',
    default: 1,
    min: 1,
    max: 3600,
    unit: 's',
    readBy: UPLOADS,
    chart: { key: 'overloadRetryAfterSeconds' },
    doc: '`Retry-After` on an overload answer (503/5001).',
  },

  // Scoring (the processes that load the model).
  SCORING_WORKERS: {
    section: 'scoring',
    type: 'integer',
    default: 2,
    min: 1,
    max: 64,
    readBy: SCORING,
    chart: { key: 'scoringWorkers' },
    doc: 'Scoring worker threads, one ONNX session each (one per core).',
  },
  INFERENCE_THREADS: {
    section: 'scoring',
    type: 'integer',
    default: 2,
    min: 1,
    max: 64,
    readBy: SCORING,
    chart: { key: 'inferenceThreads' },
    doc: 'ONNX Runtime threads for an image alone in the pool; under load every image uses one.',
  },
  SCORING_DEADLINE_MS: {
    section: 'scoring',
    type: 'integer',
    // The slowest legitimate images take ~1-3 s of CPU; with every core busy, well under 10 s.
    default: 15_000,
    min: 100,
    max: 600_000,
    unit: 'ms',
    readBy: SCORING,
    doc: 'The longest one image may hold a decoder process (wall time); past it the process is killed and replaced and the image answered 400/4005, charged. An image whose predicted work (docs/image-cost.md) cannot finish inside it on one core is refused before any work (4005, charged).',
  },
  DECODER_PROCESSES: {
    section: 'scoring',
    type: 'integer',
    // One more than the cores: while one decoder hands its model input over, both cores still decode.
    default: 3,
    min: 1,
    max: 64,
    readBy: SCORING,
    doc: 'Decoder processes at most, each decoding one image at a time (no model), so that a kill harms no other image; started when a costly or unusual image needs one (`IN_PROCESS_MAX_PIXELS`), ended after `DECODER_IDLE_MS` without one; each costs ~35 MiB while it runs.',
  },
  DECODER_IDLE_MS: {
    section: 'scoring',
    type: 'integer',
    // Long enough that a burst of large images does not start a process per image; short enough that
    // ordinary traffic runs none.
    default: 30_000,
    min: 100,
    max: 3_600_000,
    unit: 'ms',
    readBy: SCORING,
    doc: 'A decoder process without an image for this long ends (its memory given back); the next image that needs one starts one.',
  },
  IN_PROCESS_MAX_PIXELS: {
    section: 'scoring',
    type: 'integer',
    // 8 Mi pixels: a 4K UHD frame (3840 × 2160) and under, about the work gate's small lane.
    default: 8_388_608,
    min: 0,
    max: 200_000_000,
    readBy: SCORING,
    doc: 'An ordinary image (docs/isolation-and-charging.md, “Which path”) of at most this many pixels is decoded in the scoring worker thread that infers it; larger, costly or unusual images in a decoder process. 0: every image in a decoder process.',
  },
  DECODE_CPU_LIMIT_MS: {
    section: 'scoring',
    type: 'integer',
    // The costliest image within the spec's limits (a 196 MP progressive 4:4:4 JPEG) takes ~1.8 s of CPU.
    default: 6_000,
    min: 50,
    max: 600_000,
    unit: 'ms',
    readBy: SCORING,
    doc: "CPU time one image's decode may take at most; a smaller image is held to what an ordinary image of its size needs. Past it the decoder is killed and the image answered 400/4005, charged.",
  },
  MAX_TILES: {
    section: 'scoring',
    type: 'integer',
    // 8 square tiles, each overlapping the next by half, cover a frame of aspect ratio 4.5 (the largest
    // allowed JPEG, 30,000 × 6,666); a longer one gets longer tiles. Each tile is one inference.
    default: 8,
    min: 1,
    max: 64,
    readBy: SCORING,
    doc: 'A frame more than 2.5 times as long as its short edge is scored as overlapping near-square tiles along its long side, at most this many (each one inference; longer frames get longer tiles), and answers its highest tile’s scores; 1: never tiled. docs/models.md, “Tiles and margins”.',
  },
  MAX_FRAMES_SCORED: {
    section: 'scoring',
    type: 'integer',
    // The spec scores the first frame only; more is the operator's choice (image/frames.ts).
    default: 1,
    min: 1,
    max: 64,
    readBy: SCORING,
    chart: { key: 'maxFramesScored' },
    crd: 'maxFramesScored',
    doc: 'Frames of an animated GIF, WebP or APNG (pages of a TIFF) scored, at most, taken evenly from the first to the last; the highest answers and `image.frames_scored` / `image.decisive_frame` say which. 1: the first frame only (spec). Decoding them is bounded from the header (200 MP of frames, else 400/4004). docs/image-cost.md, “Tiles, borders and frames”.',
  },
  PDQ_HASHES: {
    section: 'scoring',
    type: 'enum',
    // Auto: every image is hashed while a list is in force, and no image pays for a hash nothing is
    // matched against: it costs ~3 ms of CPU at 1 MP and ~5 ms at 3 MP, a fifth of the throughput
    // (docs/performance.md).
    default: 'auto',
    values: ['off', 'auto', 'on'],
    readBy: SCORING,
    chart: { key: 'pdqHashes' },
    doc: "`on`: Meta's PDQ hash of each scored image in the answer (`image.pdq`, `image.pdq_quality`) and matching against the hash lists (HASH_LISTS_FILE, or the HashList resources with HASH_LISTS_FROM=redis; `matches`); `auto`: the same while at least one list is in force (from the next request after one is imported or applied), else no hash; `off`: neither, no list loaded (`matches` is empty). The hash costs ~3 ms of CPU per 1 MP JPEG and ~5 ms at 3 MP (~12 ms at 1 MP where the native addon is not built). docs/hash-matching.md.",
  },
  HASH_LISTS_FILE: {
    section: 'scoring',
    type: 'string',
    default: '.data/hash-lists.db',
    readBy: ['detect', 'all-in-one', 'admin'],
    doc: 'The known-bad PDQ hash lists (`npm run admin -- hash-list …`), an SQLite file readable by its owner only, resolved against the working directory; absent: no lists. docs/hash-matching.md.',
  },
  HASH_LISTS_FROM: {
    section: 'scoring',
    type: 'enum',
    default: 'file',
    values: ['file', 'redis'],
    readBy: ['detect'],
    doc: '`file`: the lists of HASH_LISTS_FILE (`npm run admin -- hash-list …`); `redis`: the HashList resources the operator publishes to the Redis it shares with the services (the chart sets this when the operator is on). docs/hash-matching.md.',
  },
  HASH_LISTS_RELOAD_SECONDS: {
    section: 'scoring',
    type: 'integer',
    default: 3,
    min: 1,
    max: 10,
    unit: 's',
    readBy: SCORING,
    doc: 'How often the hash lists are checked for a change; a changed list is in force on the next request after it has loaded.',
  },
  PDQ_MIN_QUALITY: {
    section: 'scoring',
    type: 'integer',
    // Meta's threshold (threatexchange QUALITY_THRESHOLD): flat or tiny images hash unreliably.
    default: 50,
    min: 0,
    max: 100,
    readBy: SCORING,
    doc: 'Images whose PDQ quality (0–100) is below this are not matched against the hash lists (their hash is still answered).',
  },
  JPEG_DECODER: {
    section: 'scoring',
    type: 'enum',
    default: 'auto',
    values: ['auto', 'libjpeg', 'sharp'],
    readBy: SCORING,
    doc: '`auto`: the libjpeg fast path where it was built, else sharp; `libjpeg`: the fast path required; `sharp`: every JPEG through sharp.',
  },
  EDGE_SECRET: {
    section: 'scoring',
    type: 'string',
    default: undefined,
    minLength: 16,
    readBy: ['detect'],
    doc: 'Cluster mode: detect takes a request’s identity headers only with `x-edge-secret: <this>`, which Envoy adds (at least 16 characters).',
  },

  // The core every process reads.
  HOST: {
    section: 'core',
    type: 'string',
    default: '0.0.0.0',
    readBy: EVERY,
    doc: 'Address to listen on.',
  },
  LOG_LEVEL: {
    section: 'core',
    type: 'enum',
    default: 'info',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    readBy: EVERY,
    chart: { key: 'logLevel' },
    doc: 'Log level. Faults are logged at `error` with their stack, refusals as one `requests refused` line per 10 s; never image bytes.',
  },
  TRUSTED_PROXY_HOPS: {
    section: 'core',
    type: 'integer',
    default: 0,
    min: 0,
    max: 10,
    readBy: EVERY,
    doc: 'X-Forwarded-For hops a trusted edge adds (0: the socket address). The chart sets `envoy.xffNumTrustedHops` + 1.',
  },
  CLIENT_IPV6_PREFIX_LENGTH: {
    section: 'core',
    type: 'integer',
    // A /64 is one subscriber's allocation; wider than a /32 (an ISP's) would put unrelated clients together.
    default: 64,
    min: 32,
    max: 128,
    readBy: EVERY,
    doc: 'Per-address limits (anonymous quota, uploads and key lookups per address, console sign-ups and logins) count an IPv6 client by its network of this many bits (128: each address); IPv4 is per address, IPv4-mapped IPv6 is its IPv4 address.',
  },
  SHUTDOWN_GRACE_MS: {
    section: 'core',
    type: 'integer',
    default: 25_000,
    min: 0,
    // The longest timer Node keeps: a longer one fires at once, which would end every shutdown in exit 1.
    max: 2_147_483_647,
    unit: 'ms',
    readBy: EVERY,
    chart: { key: 'shutdownGraceMs' },
    doc: 'How long SIGTERM waits for requests in flight (the chart gives pods 10 s more).',
  },
  SHUTDOWN_DELAY_MS: {
    section: 'core',
    type: 'integer',
    default: 0,
    min: 0,
    max: 60_000,
    unit: 'ms',
    readBy: EVERY,
    // In a cluster the endpoints, kube-proxy and Envoy need a few seconds to let go of a pod.
    chart: { key: 'shutdownDelayMs', default: 5000 },
    below: { setting: 'SHUTDOWN_GRACE_MS', why: 'the drain is part of the grace period' },
    doc: 'On SIGTERM, first keep serving this long, not ready and closing each connection after its answer (part of the grace period: less than SHUTDOWN_GRACE_MS).',
  },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    section: 'core',
    type: 'string',
    default: undefined,
    pattern: '^(https?://.+)?$',
    readBy: EVERY,
    chart: { key: 'otlpEndpoint', default: '', env: false },
    doc: 'When set (`http://collector:4318`), traces are exported over OTLP/HTTP.',
  },
  TRACE_SAMPLE_RATIO: {
    section: 'core',
    type: 'number',
    default: 1,
    min: 0,
    max: 1,
    unit: 'probability',
    readBy: EVERY,
    doc: 'Share of the traces that start in this process which are recorded (parent-based). The chart sets `envoy.tracing.samplingPercent` / 100.',
  },

  // Redis (unset: memory counters and the accounts file).
  REDIS_URL: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: '`redis://…`: counters, accounts and keys in one Redis (at most one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES).',
  },
  REDIS_SENTINELS: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: '`host:port,…` of the sentinels of a primary with replicas (with REDIS_SENTINEL_MASTER).',
  },
  REDIS_SENTINEL_MASTER: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: 'The name the sentinels monitor.',
  },
  REDIS_SENTINEL_PASSWORD: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: 'The sentinels’ own password.',
  },
  REDIS_CLUSTER_NODES: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: '`host:port,…` of some Redis Cluster nodes (the client discovers the rest).',
  },
  REDIS_USERNAME: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: 'The data nodes’ ACL user.',
  },
  REDIS_PASSWORD: {
    section: 'redis',
    type: 'string',
    default: undefined,
    readBy: EVERY,
    doc: 'The data nodes’ password (with REDIS_URL, a password in the URL wins).',
  },
  REDIS_WAIT_REPLICAS: {
    section: 'redis',
    type: 'integer',
    default: undefined,
    min: 0,
    max: 16,
    readBy: EVERY,
    doc: 'Replicas that must acknowledge (`WAIT`) each write to accounts, keys, tiers and revocations. Unset: 1 with Sentinel or Cluster, 0 with a URL.',
  },
  REDIS_KEY_PREFIX: {
    section: 'redis',
    type: 'string',
    default: 'nsfwd:',
    readBy: EVERY,
    chart: { key: 'redisKeyPrefix' },
    doc: 'Prefix of every Redis key, so one Redis can serve several deployments.',
  },
  REDIS_COMMAND_TIMEOUT_MS: {
    section: 'redis',
    type: 'integer',
    // 100 ms tripped now and then under load on a busy 2-core node.
    default: 500,
    min: 1,
    max: 60_000,
    unit: 'ms',
    readBy: EVERY,
    chart: { key: 'redisCommandTimeoutMs' },
    doc: 'Bound on each Redis command; past it 503/5001, the request not charged.',
  },
  REDIS_SOCKET_TIMEOUT_MS: {
    section: 'redis',
    type: 'integer',
    default: 1000,
    min: 1,
    max: 600_000,
    unit: 'ms',
    readBy: EVERY,
    doc: 'A connection that answers nothing this long while commands wait is reconnected.',
  },
  REDIS_CONNECT_TIMEOUT_MS: {
    section: 'redis',
    type: 'integer',
    default: 1000,
    min: 1,
    max: 60_000,
    unit: 'ms',
    readBy: EVERY,
    doc: 'Bound on connecting to Redis.',
  },

  // Where each process listens and keeps its files.
  PORT: {
    section: 'ports',
    type: 'integer',
    default: 8080,
    min: 0,
    max: 65535,
    readBy: ['all-in-one'],
    doc: 'Port of `npm start` (0: any free port, printed in the `listening` line).',
  },
  QUOTA_PORT: {
    section: 'ports',
    type: 'integer',
    default: 8081,
    min: 0,
    max: 65535,
    readBy: ['quota'],
    doc: 'Port of the stand-alone quota service.',
  },
  SOURCE_LIMIT_PORT: {
    section: 'ports',
    type: 'integer',
    default: 0,
    min: 0,
    max: 65535,
    readBy: ['quota'],
    doc: "Loopback port on which the stand-alone quota service answers its Envoy's rate-limit calls (gRPC), one per new client connection: SOURCE_CONNECTIONS_PER_SECOND and SOURCE_CONNECTIONS_BURST per source (docs/edge.md). 0: not served (the chart sets it with envoy.sourceLimit.port).",
  },
  SOURCE_CONNECTIONS_PER_SECOND: {
    section: 'ports',
    type: 'integer',
    default: 20,
    min: 1,
    readBy: ['quota'],
    chart: { key: 'sourceConnectionsPerSecond' },
    doc: 'New edge connections a second one source (an IPv4 address, an IPv6 network of CLIENT_IPV6_PREFIX_LENGTH bits) may open on average; past it Envoy closes its new connections at once. One gateway pod each.',
  },
  SOURCE_CONNECTIONS_BURST: {
    section: 'ports',
    type: 'integer',
    default: 100,
    min: 1,
    readBy: ['quota'],
    chart: { key: 'sourceConnectionsBurst' },
    doc: 'New edge connections one source may open at once before SOURCE_CONNECTIONS_PER_SECOND applies.',
  },
  DETECT_PORT: {
    section: 'ports',
    type: 'integer',
    default: 8082,
    min: 0,
    max: 65535,
    readBy: ['detect'],
    doc: 'Port of the stand-alone detect service.',
  },
  HEALTH_PORT: {
    section: 'ports',
    type: 'integer',
    default: 8083,
    min: 0,
    max: 65535,
    readBy: ['health'],
    doc: 'Port of the stand-alone health service.',
  },
  SIGNUP_PER_MINUTE: {
    section: 'policy',
    type: 'integer',
    default: 30,
    min: 1,
    unit: 'requests',
    readBy: ['quota', 'all-in-one'],
    doc: 'Console sign-ups from every address together per minute; past it 429/4290.',
  },
  SIGNUP_PER_DAY: {
    section: 'policy',
    type: 'integer',
    default: 1000,
    min: 1,
    unit: 'requests',
    readBy: ['quota', 'all-in-one'],
    doc: 'Console sign-ups from every address together per UTC day; past it 429/4291.',
  },
  KEY_LAST_USED_INTERVAL_MS: {
    section: 'policy',
    type: 'integer',
    default: 60_000,
    min: 1000,
    max: 86_400_000,
    unit: 'ms',
    readBy: ['quota', 'all-in-one'],
    doc: "How often at most a key's last use (the console's \"last used\") is written: one write per key per interval, whatever the traffic, so that it does not grow the accounts store's log.",
  },
  SIGNUP_NETWORK_SHARE_PERCENT: {
    section: 'policy',
    type: 'integer',
    default: 10,
    min: 1,
    max: 100,
    readBy: ['quota', 'all-in-one'],
    doc: 'The most of SIGNUP_PER_MINUTE and of SIGNUP_PER_DAY (each at least 1) that the sign-ups of one network (NETWORK_IPV4_PREFIX_LENGTH, NETWORK_IPV6_PREFIX_LENGTH) may take; past it 429/4290 or 4291 for that network only. A sign-up of an e-mail that already has an account takes nothing from either.',
  },
  NETWORK_IPV4_PREFIX_LENGTH: {
    section: 'policy',
    type: 'integer',
    default: 24,
    min: 8,
    max: 32,
    readBy: ['quota', 'all-in-one'],
    doc: 'A network, for the shares of a site-wide total (SIGNUP_NETWORK_SHARE_PERCENT): IPv4 addresses (and IPv4-mapped IPv6) with these many leading bits in common.',
  },
  NETWORK_IPV6_PREFIX_LENGTH: {
    section: 'policy',
    type: 'integer',
    default: 48,
    min: 16,
    max: 128,
    readBy: ['quota', 'all-in-one'],
    doc: 'A network, for the shares of a site-wide total (SIGNUP_NETWORK_SHARE_PERCENT): IPv6 addresses with these many leading bits in common (a /48: one site; a home /56 is inside one).',
  },
  ACCOUNTS_FILE: {
    section: 'ports',
    type: 'string',
    default: '.data/accounts.json',
    readBy: ['quota', 'all-in-one', 'admin'],
    doc: 'The embedded accounts, keys and sessions file (without Redis), resolved against the working directory.',
  },

  // The operator.
  OPERATOR_NAMESPACE: {
    section: 'operator',
    type: 'string',
    default: 'default',
    readBy: ['operator'],
    doc: 'The namespace whose DetectionPolicies and ApiAccounts it reconciles.',
  },
  OPERATOR_IDENTITY: {
    section: 'operator',
    type: 'string',
    default: undefined,
    defaultDoc: 'host name-pid',
    readBy: ['operator'],
    doc: 'Its identity in the leader Lease (the chart sets the pod name).',
  },
  OPERATOR_LEASE_SECONDS: {
    section: 'operator',
    type: 'integer',
    default: 15,
    min: 1,
    max: 600,
    unit: 's',
    readBy: ['operator'],
    doc: 'Lease duration: a standby takes over this long after the leader stops renewing.',
  },
  OPERATOR_RETRY_MS: {
    section: 'operator',
    type: 'integer',
    default: 2000,
    min: 100,
    max: 60_000,
    unit: 'ms',
    readBy: ['operator'],
    doc: 'How often the Lease is renewed or tried (below two thirds of the Lease).',
  },
  OPERATOR_RESYNC_MS: {
    section: 'operator',
    type: 'integer',
    default: 300_000,
    min: 1000,
    unit: 'ms',
    readBy: ['operator'],
    doc: 'Every resource is reconciled again this often (drift heals).',
  },
  OPERATOR_METRICS_PORT: {
    section: 'operator',
    type: 'integer',
    default: 9090,
    min: 0,
    max: 65535,
    readBy: ['operator'],
    doc: 'Port of its `/metrics` and probes (`/internal/live`, `/internal/ready`).',
  },
  OPERATOR_DETECT_DEPLOYMENT: {
    section: 'operator',
    type: 'string',
    default: undefined,
    pattern: '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$',
    readBy: ['operator'],
    doc: 'The detect Deployment a DetectionPolicy’s model rolls (the chart sets `<release>-detect`); unset: no rollouts.',
  },
  OPERATOR_POLICY_READERS: {
    section: 'operator',
    type: 'string',
    default: undefined,
    readBy: ['operator'],
    doc: '`service/port,…` whose ready pods must report a policy generation before it is Ready.',
  },
  OPERATOR_HASH_LIST_READERS: {
    section: 'operator',
    type: 'string',
    default: undefined,
    readBy: ['operator'],
    doc: '`service/port,…` whose ready pods are asked which hash lists they hold (GET /internal/hash-lists): a HashList is Ready once all of them hold it.',
  },
} as const satisfies Record<string, Setting>;

export type SettingName = keyof typeof SETTINGS;
type Table = typeof SETTINGS;
type NamesWhere<T> = { [K in SettingName]: Table[K] extends T ? K : never }[SettingName];

/** The integer settings with a default, and those unset by default. */
export type IntegerName = NamesWhere<{ type: 'integer'; default: number }>;
export type OptionalIntegerName = NamesWhere<{ type: 'integer'; default: undefined }>;
export type NumberName = NamesWhere<{ type: 'number' }>;
export type StringName = NamesWhere<{ type: 'string'; default: string }>;
export type OptionalStringName = NamesWhere<{ type: 'string'; default: undefined }>;
export type EnumName = NamesWhere<{ type: 'enum' }>;
export type EnumValue<N extends EnumName> = Table[N]['values'][number];
/** The settings that must be less than another of their kind (`below`). */
export type BelowName =
  | NamesWhere<{ type: 'integer'; default: number; below: { setting: IntegerName } }>
  | NamesWhere<{ type: 'number'; below: { setting: NumberName } }>;

export function setting(name: SettingName): Setting {
  return SETTINGS[name];
}
