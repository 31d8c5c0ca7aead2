// A fixed pool of scoring worker threads, one ONNX session each. onnxruntime-node runs a session
// synchronously on its calling thread: on the main thread it would stall every other request (health
// included). Here the main thread only does I/O, sniffing and header probes, and each core can infer.
// The workers decode ordinary images themselves (`score`: the header bounds their cost, decode-route.ts)
// and infer the model inputs decoder processes made of the others (`infer`, decoder-pool.ts): a costly
// decode must be killable, and terminating a thread that runs a session aborts the whole process.
//
// Supervision: a worker that dies takes only its own images down (5001), and so does a worker that
// holds an image past the scoring deadline — it is terminated and a fresh one takes its place, so no
// input can hold a scoring thread forever. A thread blocked in native code does not end when told to;
// it is counted as stuck (common/stuck-threads.ts) and the pool reports itself wedged once it has lost
// as many threads as it has workers, for the orchestrator to restart the process.

import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import { ApiError } from '../../../lib/common/errors.ts';
import { inputSizeOf, type ModelChoice } from '../../../lib/common/model-catalogue.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { markThreadStuck } from '../../../lib/common/stuck-threads.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import { restrictSharpLoaders } from '../image/sharp-restrictions.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import { disableOrtTelemetry } from '../model/onnx-classifier.ts';
import {
  type ImageScorer,
  isLargeImage,
  type PerImage,
  type ScoredImage,
  type ScorerState,
  type StillHeld,
} from './image-scorer.ts';
import { errorFromReply } from './reply-error.ts';
import type { ScoreRequest, ScorerWorkerData } from './scorer-worker.ts';

// Compiled (dist/, the production image): the worker is plain JavaScript. From source, the .mjs entry
// loads the TypeScript worker through tsx.
const ENTRY = import.meta.url.endsWith('.js')
  ? new URL('./scorer-worker.js', import.meta.url)
  : new URL('./scorer-worker-entry.mjs', import.meta.url);

/**
 * The old-generation allocation limit a scoring worker's V8 heap starts with, in MB. A worker's JS
 * heap is small (~8 MB), but V8 counts off-heap memory allocated since the last full collection against
 * that limit: with V8's default limit for an 8 MB heap, a worker whose images sharp decodes (~3.6 MB
 * off-heap each) runs a full mark-compact every ~10 images, which 64 MB avoids (~10% more images per
 * second). A JPEG on the libjpeg fast path leaves ~0.8 MB off-heap (upload and model input), and
 * 16 MB measured the same CPU per request and req/s as 64 at ~18 MiB lower peak RSS
 * (bench/detect-cost.ts, concurrency 8, medians of 3 rounds: 12.23 vs 12.41 ms, 157.7 vs 155.3 req/s,
 * 374 vs 392 MiB); 8 cost more CPU (12.74 ms) for no less memory.
 */
const WORKER_INITIAL_OLD_SPACE_MB = 16;

/** A terminated worker that has not ended after this long is stuck in native code. */
const STUCK_AFTER_MS = 2_000;

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
  /** Decoded already: the worker only infers (see score's `tensor`). */
  tensor?: Float32Array | undefined;
  /** See isLargeImage: at most one such job per worker, and on at most half the workers. */
  large: boolean;
  resolve: (scored: ScoredImage) => void;
  reject: (err: Error) => void;
  /** Armed when the job is handed to a worker. */
  deadline?: NodeJS.Timeout;
  /** Told of the PDQ before inference (PerImage.onPdq). */
  onPdq?: ((pdq: ImagePdq) => void) | undefined;
  /** PerImage.pdq. */
  pdq?: boolean | undefined;
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
  | { id: number; pdq: ImagePdq }
  | ({ id: number; ok: true } & ScoredImage)
  | { id: number; ok: false; code?: number; message: string };

export interface WorkerPoolOptions {
  model: ModelChoice;
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
  /** Tiles a long frame is scored as, at most, after its margins are trimmed (MAX_TILES; default: its default). */
  maxTiles?: number;
  /** Also hash each decoded frame with PDQ (PDQ_HASHES). */
  pdq?: boolean;
  /** Called when a worker dies and is replaced (for logging). */
  onWorkerError?: (err: Error) => void;
  /** The worker script; tests substitute one that misbehaves. Default: the ONNX scoring worker. */
  entry?: URL;
  /** The longest a worker may hold one image, from the moment it is handed over (SCORING_DEADLINE_MS). */
  deadlineMs: number;
}

export class WorkerPoolScorer implements ImageScorer {
  readonly model: ModelChoice;
  readonly inputSize: number;
  readonly #opts: WorkerPoolOptions;
  readonly #perWorker: number;
  /** Workers that may hold a large image at once: half of them (rounded up) stay free for the rest. */
  readonly #maxLarge: number;
  readonly #queue: Job[] = [];
  readonly #slots = new Set<Slot>();
  /** Terminated workers that did not end within STUCK_AFTER_MS (and have not ended since). */
  #stuck = 0;
  #nextId = 1;
  #closed = false;

  private constructor(opts: WorkerPoolOptions) {
    this.#opts = opts;
    this.#perWorker = Math.max(1, opts.jobsPerWorker ?? 2);
    this.#maxLarge = Math.ceil(opts.workers / 2);
    this.model = opts.model;
    this.inputSize = inputSizeOf(opts.model);
  }

  /** Resolves once every worker has loaded its model; rejects if any cannot. */
  static async create(opts: WorkerPoolOptions): Promise<WorkerPoolScorer> {
    disableOrtTelemetry();
    // Before any worker decodes: set by a worker, it could fail another's decode (sharp-restrictions.ts).
    restrictSharpLoaders();
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

  /**
   * Its first frame only (of PerImage, only pdq and onPdq): RoutedScorer sends an image of which several
   * frames are scored to a decoder process (decode-route.ts), and only its model input here.
   */
  score(
    bytes: Uint8Array,
    probed: ProbedImage,
    _stillHeld?: StillHeld,
    perImage?: PerImage,
  ): Promise<ScoredImage> {
    return this.#enqueue(bytes, probed, undefined, perImage);
  }

  /**
   * Inference alone on a model input a decoder process made (routed-scorer.ts); takes ownership of
   * `tensor`. The decode fields of the answer are zero: the caller has them.
   */
  infer(tensor: Float32Array, probed: ProbedImage): Promise<ScoredImage> {
    return this.#enqueue(new Uint8Array(0), probed, tensor);
  }

  #enqueue(
    bytes: Uint8Array,
    probed: ProbedImage,
    tensor: Float32Array | undefined,
    perImage?: PerImage,
  ): Promise<ScoredImage> {
    if (this.#closed) return Promise.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    return new Promise<ScoredImage>((resolve, reject) => {
      this.#queue.push({
        id: this.#nextId++,
        bytes,
        probed,
        tensor,
        // A model input is small, whatever the image was.
        large: tensor === undefined && isLargeImage(bytes, probed),
        resolve,
        reject,
        onPdq: perImage?.onPdq,
        pdq: perImage?.pdq,
      });
      this.#dispatch();
    });
  }

  /** `ready` while a worker can take an image; `wedged` once as many threads are stuck as there are workers. */
  get state(): ScorerState {
    if (this.#stuck >= this.#opts.workers) return 'wedged';
    for (const slot of this.#slots) if (slot.ready) return 'ready';
    return 'recovering';
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    const slots = [...this.#slots];
    this.#slots.clear();
    await Promise.all(slots.map((slot) => this.#stop(slot)));
  }

  /**
   * Terminates a worker, resolving once it has ended or has been counted as stuck (then it is never
   * waited for again: its thread may never come back from native code).
   */
  #stop(slot: Slot): Promise<void> {
    const ended = slot.worker.terminate().then(() => undefined);
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#stuck += 1;
        const stuck = markThreadStuck();
        this.#opts.onWorkerError?.(
          new Error(`scoring worker stuck: not ended ${STUCK_AFTER_MS} ms after terminate`),
        );
        void ended.then(() => {
          this.#stuck -= 1;
          stuck.ended();
        });
        resolve();
      }, STUCK_AFTER_MS);
      void ended.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * Takes a worker out of the pool: its images get 5001 (`why` for the one that caused it), and unless
   * the pool is closing a fresh worker takes its place.
   */
  #retire(slot: Slot, cause: Error, why?: { job: Job; message: string }): boolean {
    if (!this.#slots.delete(slot)) return false;
    for (const job of slot.jobs.values()) {
      clearTimeout(job.deadline);
      const message = job === why?.job ? why.message : 'Scoring failed; try again';
      job.reject(new ApiError('UNAVAILABLE', message, { 'retry-after': '1' }, cause));
    }
    slot.jobs.clear();
    return true;
  }

  #spawn(solo: boolean): Promise<void> {
    const data: ScorerWorkerData = {
      model: this.#opts.model,
      soloThreads: solo ? this.#opts.intraOpThreads : 1,
      limits: this.#opts.limits,
      jpegDecoder: this.#opts.jpegDecoder ?? 'sharp',
      maxTiles: this.#opts.maxTiles ?? SETTINGS.MAX_TILES.default,
      pdq: this.#opts.pdq ?? false,
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
        if (!('ok' in reply)) return slot.jobs.get(reply.id)?.onPdq?.(reply.pdq);
        this.#finish(slot, reply);
      });
      const onDeath = (err: Error) => {
        if (!this.#retire(slot, err)) return;
        if (!slot.ready) return reject(err);
        this.#replace(slot, err);
      };
      worker.on('error', onDeath);
      worker.on('exit', (code) => onDeath(new Error(`scoring worker exited with code ${code}`)));
    });
  }

  #replace(slot: Slot, cause: Error): void {
    if (this.#closed) return;
    this.#opts.onWorkerError?.(cause);
    this.#spawn(slot.solo).catch((spawnErr: Error) => this.#opts.onWorkerError?.(spawnErr));
  }

  /** A job past its deadline: its worker is terminated and replaced, its images answered 5001. */
  #expire(slot: Slot, job: Job): void {
    const { deadlineMs } = this.#opts;
    const cause = new Error(`scoring worker held an image past the ${deadlineMs} ms deadline`);
    const message = `Scoring did not finish within ${deadlineMs / 1000} s; try again`;
    if (!this.#retire(slot, cause, { job, message })) return;
    void this.#stop(slot);
    this.#replace(slot, cause);
    this.#dispatch();
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
      job.deadline = setTimeout(() => this.#expire(slot, job), this.#opts.deadlineMs);
      // Hand the upload over without a copy when it owns its whole buffer (large uploads do); the
      // caller is done with it. Small pooled buffers are copied.
      const { bytes, tensor } = job;
      const transfer = [bytes, ...(tensor ? [tensor] : [])].flatMap((view) =>
        view.byteOffset === 0 &&
        view.byteLength === view.buffer.byteLength &&
        view.buffer instanceof ArrayBuffer
          ? [view.buffer]
          : [],
      );
      const request: ScoreRequest = {
        id: job.id,
        bytes,
        probed: job.probed,
        solo,
        ...(tensor ? { tensor } : {}),
        ...(job.onPdq && { earlyPdq: true }),
        ...(job.pdq !== undefined && { pdq: job.pdq }),
      };
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

  #finish(slot: Slot, reply: Extract<WorkerReply, { ok: boolean }>): void {
    const job = slot.jobs.get(reply.id);
    slot.jobs.delete(reply.id);
    if (job) {
      clearTimeout(job.deadline);
      if (reply.ok) {
        const { scores, decodeStartedAt, decodeMs, inferenceMs, frames, pdq } = reply;
        job.resolve({
          scores,
          decodeStartedAt,
          decodeMs,
          inferenceMs,
          ...(frames && { frames }),
          ...(pdq && { pdq }),
        });
      } else job.reject(errorFromReply(reply));
    }
    this.#dispatch();
  }
}
