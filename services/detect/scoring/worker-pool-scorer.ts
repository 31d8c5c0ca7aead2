// A fixed pool of scoring worker threads, one ONNX session each. onnxruntime-node runs a session
// synchronously on its calling thread, and BMP decoding is plain JavaScript: on the main thread
// either would stall every other request (health included) for the whole image. Here the main
// thread only does I/O, sniffing and header probes, and each core can score an image.

import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import { ApiError, errorNameForCode } from '../../common/errors.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import { MODEL_INPUT_SIZE, type ModelName } from '../model/classifier.ts';
import { disableOrtTelemetry } from '../model/onnx-classifier.ts';
import { type ImageScorer, isLargeImage, type ScoredImage } from './image-scorer.ts';
import type { ScoreRequest, ScorerWorkerData } from './scorer-worker.ts';

// Compiled (dist/, the production image): the worker is plain JavaScript. From source, the .mjs entry
// loads the TypeScript worker through tsx.
const ENTRY = import.meta.url.endsWith('.js')
  ? new URL('./scorer-worker.js', import.meta.url)
  : new URL('./scorer-worker-entry.mjs', import.meta.url);

/**
 * The old-generation allocation limit a scoring worker's V8 heap starts with, in MB. A worker's JS
 * heap is small (~8 MB), but V8 counts off-heap memory allocated since the last full collection against
 * that limit, and with V8's default limit for an 8 MB heap a worker ran a full mark-compact every ~10
 * images when sharp decoded every JPEG (~3.6 MB off-heap per image). 64 MB fixed that then (~10% more
 * images per second). With the libjpeg fast path a JPEG leaves ~0.8 MB off-heap (upload and model
 * input), and 16 MB measured the same CPU per request and req/s as 64 at ~18 MiB lower peak RSS
 * (bench/detect-cost.ts, concurrency 8, medians of 3 rounds: 12.23 vs 12.41 ms, 157.7 vs 155.3 req/s,
 * 374 vs 392 MiB); 8 cost more CPU (12.74 ms) for no less memory.
 */
const WORKER_INITIAL_OLD_SPACE_MB = 16;

/**
 * V8 reads its heap flags when an isolate is created, and a Worker's resourceLimits cannot set an
 * initial size: set the flag just before spawning. The flag is process-wide but only reaches isolates
 * created after it: the main thread's heap (created at startup) keeps V8's defaults, and no heap's
 * maximum size changes.
 */
function sizeNextWorkerHeaps(): void {
  setFlagsFromString(`--initial-old-space-size=${WORKER_INITIAL_OLD_SPACE_MB}`);
}

interface Job {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
  /** See isLargeImage: at most one such job per worker, and on at most half the workers. */
  large: boolean;
  resolve: (scored: ScoredImage) => void;
  reject: (err: Error) => void;
}

interface Slot {
  worker: Worker;
  /** This worker also holds a multi-threaded session, for an image alone in the pool. */
  solo: boolean;
  /** Jobs sent to this worker and not yet answered, by id. */
  jobs: Map<number, Job>;
  ready: boolean;
}

type WorkerReply =
  | { ready: true }
  | { fatal: string }
  | ({ id: number; ok: true } & ScoredImage)
  | { id: number; ok: false; code?: number; message: string };

export interface WorkerPoolOptions {
  model: ModelName;
  workers: number;
  /**
   * Images each worker takes at once (default 2): while one is inferred on the worker's JS thread, the
   * next ones are already decoding on libvips threads, filling the cores' idle gaps (a decode hands its
   * work between threads and keeps ~1.1 cores busy). Large images are at most one per worker.
   */
  jobsPerWorker?: number;
  /**
   * ONNX threads for an image that is alone in the pool (one worker holds a session with this many;
   * each extra session costs ~26 MB for mobilenet_v2). With company, every image uses one thread.
   */
  intraOpThreads: number;
  limits: DimensionLimits;
  /** How the workers decode JPEGs (already resolved: see resolveJpegDecoder). Default `sharp`. */
  jpegDecoder?: JpegDecoder;
  /** Called when a worker dies and is replaced (for logging). */
  onWorkerError?: (err: Error) => void;
  /** The worker script; tests substitute one that misbehaves. Default: the ONNX scoring worker. */
  entry?: URL;
}

export class WorkerPoolScorer implements ImageScorer {
  readonly model: ModelName;
  readonly inputSize: number;
  readonly #opts: WorkerPoolOptions;
  readonly #perWorker: number;
  /** Workers that may hold a large image at once: half of them (rounded up) stay free for the rest. */
  readonly #maxLarge: number;
  readonly #queue: Job[] = [];
  readonly #slots = new Set<Slot>();
  #nextId = 1;
  #closed = false;

  private constructor(opts: WorkerPoolOptions) {
    this.#opts = opts;
    this.#perWorker = Math.max(1, opts.jobsPerWorker ?? 2);
    this.#maxLarge = Math.ceil(opts.workers / 2);
    this.model = opts.model;
    this.inputSize = MODEL_INPUT_SIZE[opts.model];
  }

  /** Resolves once every worker has loaded its model; rejects if any cannot. */
  static async create(opts: WorkerPoolOptions): Promise<WorkerPoolScorer> {
    disableOrtTelemetry();
    sizeNextWorkerHeaps();
    const pool = new WorkerPoolScorer(opts);
    try {
      await Promise.all(Array.from({ length: opts.workers }, (_, i) => pool.#spawn(i === 0)));
    } catch (err) {
      await pool.close();
      throw err;
    }
    return pool;
  }

  score(bytes: Uint8Array, probed: ProbedImage): Promise<ScoredImage> {
    if (this.#closed) return Promise.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    return new Promise<ScoredImage>((resolve, reject) => {
      this.#queue.push({
        id: this.#nextId++,
        bytes,
        probed,
        large: isLargeImage(bytes, probed),
        resolve,
        reject,
      });
      this.#dispatch();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    await Promise.all([...this.#slots].map((slot) => slot.worker.terminate()));
    this.#slots.clear();
  }

  #spawn(solo: boolean): Promise<void> {
    const data: ScorerWorkerData = {
      model: this.#opts.model,
      soloThreads: solo ? this.#opts.intraOpThreads : 1,
      limits: this.#opts.limits,
      jpegDecoder: this.#opts.jpegDecoder ?? 'sharp',
    };
    const worker = new Worker(this.#opts.entry ?? ENTRY, { workerData: data });
    const slot: Slot = { worker, solo, jobs: new Map(), ready: false };
    this.#slots.add(slot);
    return new Promise<void>((resolve, reject) => {
      worker.on('message', (reply: WorkerReply) => {
        if ('ready' in reply) {
          slot.ready = true;
          this.#dispatch();
          return resolve();
        }
        if ('fatal' in reply) return reject(new Error(`scoring worker failed to start: ${reply.fatal}`));
        this.#finish(slot, reply);
      });
      // A worker that dies takes only its own images down: those requests get 5001, a fresh worker
      // takes its place, and the pool keeps serving.
      const onDeath = (err: Error) => {
        if (!this.#slots.delete(slot)) return;
        for (const job of slot.jobs.values()) {
          job.reject(new ApiError('UNAVAILABLE', 'Scoring failed; try again', { 'retry-after': '1' }, err));
        }
        slot.jobs.clear();
        if (!slot.ready) return reject(err);
        if (this.#closed) return;
        this.#opts.onWorkerError?.(err);
        this.#spawn(slot.solo).catch((spawnErr: Error) => this.#opts.onWorkerError?.(spawnErr));
      };
      worker.on('error', onDeath);
      worker.on('exit', (code) => onDeath(new Error(`scoring worker exited with code ${code}`)));
    });
  }

  #dispatch(): void {
    for (let i = 0; i < this.#queue.length; ) {
      const job = this.#queue[i] as Job;
      const slot = this.#slotFor(job);
      if (!slot) {
        // A large image waits for a worker without one; smaller images behind it may go first.
        if (job.large && this.#hasRoom()) i++;
        else return;
        continue;
      }
      this.#queue.splice(i, 1);
      // Alone in the pool: the worker may spread this inference over several threads.
      const solo = slot.solo && this.#inFlight() === 0 && this.#queue.length === 0;
      slot.jobs.set(job.id, job);
      // Hand the upload over without a copy when it owns its whole buffer (large uploads do); the
      // caller is done with it. Small pooled buffers are copied.
      const { bytes } = job;
      const owns = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
      const transfer = owns && bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : [];
      const request: ScoreRequest = { id: job.id, bytes, probed: job.probed, solo };
      slot.worker.postMessage(request, transfer);
    }
  }

  /**
   * The least busy ready worker with room for `job` (the solo-capable one among equals), if any. A large
   * image (~100 MB in flight for a 4096×4000 PNG) needs a worker without one, and is refused while half
   * the workers hold one: that bounds peak memory, and ordinary images always have a worker.
   */
  #slotFor(job: Job): Slot | undefined {
    const holdsLarge = (slot: Slot) => [...slot.jobs.values()].some((j) => j.large);
    if (job.large && [...this.#slots].filter(holdsLarge).length >= this.#maxLarge) return undefined;
    let best: Slot | undefined;
    for (const slot of this.#slots) {
      if (!slot.ready || slot.jobs.size >= this.#perWorker) continue;
      if (job.large && holdsLarge(slot)) continue;
      if (!best || slot.jobs.size < best.jobs.size || (slot.jobs.size === best.jobs.size && slot.solo)) {
        best = slot;
      }
    }
    return best;
  }

  #hasRoom(): boolean {
    for (const slot of this.#slots) if (slot.ready && slot.jobs.size < this.#perWorker) return true;
    return false;
  }

  #inFlight(): number {
    let n = 0;
    for (const slot of this.#slots) n += slot.jobs.size;
    return n;
  }

  #finish(slot: Slot, reply: Exclude<WorkerReply, { ready: true } | { fatal: string }>): void {
    const job = slot.jobs.get(reply.id);
    slot.jobs.delete(reply.id);
    if (job) {
      if (reply.ok) {
        const { scores, decodeStartedAt, decodeMs, inferenceMs } = reply;
        job.resolve({ scores, decodeStartedAt, decodeMs, inferenceMs });
      } else {
        const name = reply.code === undefined ? undefined : errorNameForCode(reply.code);
        job.reject(
          name
            ? new ApiError(name, reply.message)
            : new ApiError('UNAVAILABLE', undefined, {}, new Error(reply.message)),
        );
      }
    }
    this.#dispatch();
  }
}
