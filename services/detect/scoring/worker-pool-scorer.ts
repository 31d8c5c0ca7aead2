// A fixed pool of scoring worker threads, one ONNX session each. onnxruntime-node runs a session
// synchronously on its calling thread, and BMP decoding is plain JavaScript: on the main thread
// either would stall every other request (health included) for the whole image. Here the main
// thread only does I/O, sniffing and header probes, and each core can score an image.

import { Worker } from 'node:worker_threads';
import { ApiError, errorNameForCode } from '../../common/errors.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import { MODEL_INPUT_SIZE, type ModelName } from '../model/classifier.ts';
import { disableOrtTelemetry } from '../model/onnx-classifier.ts';
import type { ImageScorer, ScoredImage } from './image-scorer.ts';
import type { ScoreRequest, ScorerWorkerData } from './scorer-worker.ts';

const ENTRY = new URL('./scorer-worker-entry.mjs', import.meta.url);

interface Job {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
  resolve: (scored: ScoredImage) => void;
  reject: (err: Error) => void;
}

interface Slot {
  worker: Worker;
  /** This worker also holds a multi-threaded session, for an image alone in the pool. */
  solo: boolean;
  job?: Job | undefined;
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
   * ONNX threads for an image that is alone in the pool (one worker holds a session with this many;
   * each extra session costs ~26 MB for mobilenet_v2). With company, every image uses one thread.
   */
  intraOpThreads: number;
  limits: DimensionLimits;
  /** Called when a worker dies and is replaced (for logging). */
  onWorkerError?: (err: Error) => void;
  /** The worker script; tests substitute one that misbehaves. Default: the ONNX scoring worker. */
  entry?: URL;
}

export class WorkerPoolScorer implements ImageScorer {
  readonly model: ModelName;
  readonly inputSize: number;
  readonly #opts: WorkerPoolOptions;
  readonly #idle: Slot[] = [];
  readonly #queue: Job[] = [];
  readonly #slots = new Set<Slot>();
  #nextId = 1;
  #closed = false;

  private constructor(opts: WorkerPoolOptions) {
    this.#opts = opts;
    this.model = opts.model;
    this.inputSize = MODEL_INPUT_SIZE[opts.model];
  }

  /** Resolves once every worker has loaded its model; rejects if any cannot. */
  static async create(opts: WorkerPoolOptions): Promise<WorkerPoolScorer> {
    disableOrtTelemetry();
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
      this.#queue.push({ id: this.#nextId++, bytes, probed, resolve, reject });
      this.#dispatch();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    await Promise.all([...this.#slots].map((slot) => slot.worker.terminate()));
    this.#slots.clear();
    this.#idle.length = 0;
  }

  #spawn(solo: boolean): Promise<void> {
    const data: ScorerWorkerData = {
      model: this.#opts.model,
      soloThreads: solo ? this.#opts.intraOpThreads : 1,
      limits: this.#opts.limits,
    };
    const worker = new Worker(this.#opts.entry ?? ENTRY, { workerData: data });
    const slot: Slot = { worker, solo };
    this.#slots.add(slot);
    return new Promise<void>((resolve, reject) => {
      let ready = false;
      worker.on('message', (reply: WorkerReply) => {
        if ('ready' in reply) {
          ready = true;
          this.#idle.push(slot);
          this.#dispatch();
          return resolve();
        }
        if ('fatal' in reply) return reject(new Error(`scoring worker failed to start: ${reply.fatal}`));
        this.#finish(slot, reply);
      });
      // A worker that dies takes only its own image down: that request gets 5001, a fresh worker
      // takes its place, and the pool keeps serving.
      const onDeath = (err: Error) => {
        if (!this.#slots.delete(slot)) return;
        const idleAt = this.#idle.indexOf(slot);
        if (idleAt >= 0) this.#idle.splice(idleAt, 1);
        slot.job?.reject(
          new ApiError('UNAVAILABLE', 'Scoring failed; try again', { 'retry-after': '1' }, err),
        );
        slot.job = undefined;
        if (!ready) return reject(err);
        if (this.#closed) return;
        this.#opts.onWorkerError?.(err);
        this.#spawn(slot.solo).catch((spawnErr: Error) => this.#opts.onWorkerError?.(spawnErr));
      };
      worker.on('error', onDeath);
      worker.on('exit', (code) => onDeath(new Error(`scoring worker exited with code ${code}`)));
    });
  }

  #dispatch(): void {
    while (this.#idle.length > 0 && this.#queue.length > 0) {
      const job = this.#queue.shift() as Job;
      // Alone in the pool: give it to the worker that can spread one inference over several threads.
      const alone = this.#queue.length === 0 && this.#busy() === 0;
      const soloAt = alone ? this.#idle.findIndex((s) => s.solo) : -1;
      const slot = this.#idle.splice(Math.max(0, soloAt), 1)[0] as Slot;
      slot.job = job;
      const solo = alone && slot.solo;
      // Hand the upload over without a copy when it owns its whole buffer (large uploads do); the
      // caller is done with it. Small pooled buffers are copied.
      const { bytes } = job;
      const owns = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
      const transfer = owns && bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : [];
      const request: ScoreRequest = { id: job.id, bytes, probed: job.probed, solo };
      slot.worker.postMessage(request, transfer);
    }
  }

  #busy(): number {
    let busy = 0;
    for (const slot of this.#slots) if (slot.job) busy++;
    return busy;
  }

  #finish(slot: Slot, reply: Exclude<WorkerReply, { ready: true } | { fatal: string }>): void {
    const job = slot.job;
    slot.job = undefined;
    this.#idle.push(slot);
    if (job && job.id === reply.id) {
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
