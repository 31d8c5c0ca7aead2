// A bounded pool of decoder processes (decoder-process.ts), each decoding ONE image at a time into its
// model input, for the images decode-route.ts does not let a scoring worker thread decode: large,
// costly or unusual ones. Inference stays in the scoring worker threads (worker-pool-scorer.ts), which
// are then never terminated in the middle of an ONNX run. Decoding is the step whose cost depends on
// what the image is, so it is the step that may be killed:
//
// - an image whose decode has used more CPU time than any ordinary image of its size needs
//   (decodeCpuLimitMs, at most `cpuLimitMs`) is killed there (SIGKILL) and answered 4005: its cost is
//   what it is, the same on an idle machine — the sender is charged for it
//   (docs/isolation-and-charging.md);
// - an image still decoding `deadlineMs` after it was handed over is killed too and answered 4005,
//   charged: images predicted not to finish inside the deadline on one core are refused before any
//   work (app.ts), so one that is cut ran on a host made busy — by images like it, as an attacker
//   would — and refunding it would make the attack free;
// - a process that dies on its own takes only its own image down (503, refunded: one image at a time,
//   but the kernel's OOM killer chooses by size, not by blame).
//
// Decoders are started when an image finds none free (at most `processes`), and end after `idleMs`
// without an image: ordinary traffic runs none, and pays no runtime for them. A killed process's image
// memory is reported (`stillHeld`) as held until the process has really exited, so the work gate does
// not admit the next image on top of it, and every ended process is listed (`pids`) until then.
// CPU time is read from /proc/<pid>/stat (the process's threads together, libvips' included); where
// there is no /proc only the wall deadline applies.

import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ApiError } from '../../../lib/common/errors.ts';
import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { pixelsToDecode } from '../image/frames.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import type { DecodeReply, DecodeRequest, DecoderProcessData } from './decoder-process.ts';
import type { PerImage, StillHeld } from './image-scorer.ts';
import { releaseBuffer } from './release-buffer.ts';
import { errorFromReply } from './reply-error.ts';

// Compiled (dist/, the production image): plain JavaScript. From source: through tsx.
const COMPILED = import.meta.url.endsWith('.js');
const ENTRY = new URL(COMPILED ? './decoder-process.js' : './decoder-process.ts', import.meta.url);

/**
 * A decoder holds one image and the runtime: V8's young generation at its smallest (the image's bytes
 * and pixels live off-heap), and glibc's malloc limited to two arenas — libvips' threads would
 * otherwise each keep an arena of freed pages (the same settings `npm start` gives the server).
 */
const EXEC_ARGV = ['--max-semi-space-size=1', ...(COMPILED ? [] : ['--import', 'tsx'])];

/** How often a busy decoder's CPU time is read; a kill lands at most this late past the limit. */
const CPU_POLL_MS = 100;

/**
 * What an ordinary image may cost to decode, in CPU time: a floor (process hand-over, small images),
 * plus its pixels and its bytes at four times the costliest rate measured for images within the spec's
 * limits (a 36 MP RGBA TIFF or 16-bit PNG, ~25 ns a pixel; a 196 MP progressive 4:4:4 JPEG ~9; a 200 MP
 * baseline one through the fast path ~1), on an Intel Xeon VM. A file built to cost more — hundreds of
 * progressive scans: ~770 ns a pixel — passes it after a fraction of its cost.
 */
const ORDINARY_DECODE_FLOOR_MS = 250;
const ORDINARY_DECODE_NS_PER_PIXEL = 100;
const ORDINARY_DECODE_NS_PER_BYTE = 10;

/**
 * The CPU time `bytes` (probed as `probed`) may take to decode before its decoder is killed and the
 * image refused as costlier than any ordinary image of its size: what an ordinary image of its size and
 * length may cost, and never more than `capMs` (DECODE_CPU_LIMIT_MS).
 */
export function decodeCpuLimitMs(
  byteLength: number,
  probed: ProbedImage,
  capMs: number,
  pixels = probed.width * probed.height,
): number {
  const ordinary =
    ORDINARY_DECODE_FLOOR_MS +
    (pixels * ORDINARY_DECODE_NS_PER_PIXEL + byteLength * ORDINARY_DECODE_NS_PER_BYTE) / 1e6;
  return Math.min(capMs, Math.ceil(ordinary));
}

/**
 * An image allowed more CPU than this (~7.5 MP and up) is heavy: like a large one, it is held by all
 * decoders but one, so that a file built to cost its whole limit cannot take every decoder.
 */
const HEAVY_DECODE_CPU_MS = 1_000;

const DEFAULT_IDLE_MS = SETTINGS.DECODER_IDLE_MS.default;

/** How long after a decoder failed to start the next one is tried. */
const RESPAWN_AFTER_MS = 1_000;

/** Linux's USER_HZ: the unit of utime and stime in /proc/<pid>/stat (fixed by the kernel ABI). */
const CLOCK_TICKS_PER_SECOND = 100;

export interface DecodedImage {
  tensor: Float32Array;
  pdq?: ImagePdq;
  /** Wall-clock start of decoding, epoch milliseconds (fractional). */
  decodeStartedAt: number;
  decodeMs: number;
}

export interface DecoderPoolOptions {
  /** Decoders running at most (DECODER_PROCESSES); each is started when an image needs one. */
  processes: number;
  /** A decoder without an image for this long ends (DECODER_IDLE_MS; default: its default). */
  idleMs?: number;
  /** Whose model input to make (an ensemble: each member's, one after another). */
  model?: ModelChoice;
  inputSize: number;
  limits: DimensionLimits;
  jpegDecoder: JpegDecoder;
  /** Tiles a long frame is scored as, at most, after its margins are trimmed (MAX_TILES; default: its default). */
  maxTiles?: number;
  /** Frames of an animation scored, at most (MAX_FRAMES_SCORED; default: its default, the first only). */
  maxFramesScored?: number;
  /** Also hash each decoded frame with PDQ (PDQ_HASHES). */
  pdq?: boolean;
  /** Wall time one image may hold a decoder, from hand-over (SCORING_DEADLINE_MS). */
  deadlineMs: number;
  /** CPU time one image's decode may take at most (DECODE_CPU_LIMIT_MS); less for a small image (decodeCpuLimitMs). */
  cpuLimitMs: number;
  /** Called when a decoder is killed or dies and is replaced (for logging). */
  onProcessError?: (err: Error) => void;
  /** The process script; tests substitute one that misbehaves. */
  entry?: URL;
}

interface Job {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
  /** Large (isLargeImage) or allowed over HEAVY_DECODE_CPU_MS: held by all decoders but one, at most. */
  heavy: boolean;
  /** Frames of an animation scored, at most: the request's, else the pool's. */
  maxFramesScored: number;
  /** PerImage.pdq. */
  pdq: boolean | undefined;
  /** Its CPU limit (decodeCpuLimitMs). */
  cpuLimitMs: number;
  stillHeld: StillHeld | undefined;
  resolve: (decoded: DecodedImage) => void;
  reject: (err: Error) => void;
}

interface Slot {
  child: ChildProcess;
  ready: boolean;
  job: Job | undefined;
  /** Settles once the process has exited. */
  exited: Promise<void>;
  /** Set when the pool ended the process itself (kill or close): its exit is no surprise. */
  ending: boolean;
  timers: NodeJS.Timeout[];
}

/** The process's CPU time (all its threads) in ms, or undefined without /proc. */
export function processCpuMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces, in parentheses): state is the first;
    // utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? (ticks * 1000) / CLOCK_TICKS_PER_SECOND : undefined;
  } catch {
    return undefined;
  }
}

export class DecoderPool {
  readonly #opts: DecoderPoolOptions;
  /** Decoders that may hold a heavy image at once: one stays free for the others when there are two. */
  readonly #maxHeavy: number;
  readonly #queue: Job[] = [];
  /** Decoders starting or running. */
  readonly #slots = new Set<Slot>();
  /** Decoders ended by the pool (idle, killed) whose process has not exited yet. */
  readonly #exiting = new Set<Slot>();
  /** After a decoder failed to start: no new one is tried before this time (performance.now()). */
  #failedUntil = 0;
  #nextId = 1;
  #closed = false;

  private constructor(opts: DecoderPoolOptions) {
    this.#opts = opts;
    this.#maxHeavy = Math.max(1, opts.processes - 1);
  }

  /**
   * Starts one decoder to show that decoders can start (rejects if it cannot), then ends it: decoders
   * are started when an image needs one, and end when idle.
   */
  static async create(opts: DecoderPoolOptions): Promise<DecoderPool> {
    const pool = new DecoderPool(opts);
    try {
      const slot = await pool.#spawn();
      pool.#end(slot);
      await slot.exited;
    } catch (err) {
      await pool.close();
      throw err;
    }
    return pool;
  }

  /** Ready unless a decoder failed to start less than RESPAWN_AFTER_MS ago (and none has since). */
  get ready(): boolean {
    return !this.#closed && performance.now() >= this.#failedUntil;
  }

  /** The decoders' process ids, those ended but not yet exited included (their memory is still held). */
  get pids(): number[] {
    return [...this.#slots, ...this.#exiting].flatMap((slot) =>
      slot.child.pid === undefined ? [] : [slot.child.pid],
    );
  }

  /**
   * The model input for `bytes` (ownership passes: the pool may copy it to a decoder and drop it).
   * `large` (isLargeImage), or allowed more than HEAVY_DECODE_CPU_MS of CPU: such images are held by
   * all decoders but one, at most, so that a light image always finds a decoder soon.
   */
  decode(
    bytes: Uint8Array,
    probed: ProbedImage,
    large: boolean,
    stillHeld?: StillHeld,
    perImage: PerImage = {},
  ): Promise<DecodedImage> {
    if (this.#closed) return Promise.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    return new Promise<DecodedImage>((resolve, reject) => {
      const maxFramesScored =
        perImage.maxFramesScored ?? this.#opts.maxFramesScored ?? SETTINGS.MAX_FRAMES_SCORED.default;
      // Several frames scored decode several frames (image/frames.ts): each is an ordinary decode.
      const cpuLimitMs = decodeCpuLimitMs(
        bytes.byteLength,
        probed,
        this.#opts.cpuLimitMs,
        pixelsToDecode(bytes, probed, maxFramesScored),
      );
      const heavy = large || cpuLimitMs > HEAVY_DECODE_CPU_MS;
      this.#queue.push({
        id: this.#nextId++,
        bytes,
        probed,
        heavy,
        maxFramesScored,
        pdq: perImage.pdq,
        cpuLimitMs,
        stillHeld,
        resolve,
        reject,
      });
      this.#dispatch();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    for (const slot of [...this.#slots]) {
      this.#settle(slot)?.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
      this.#end(slot);
    }
    await Promise.all([...this.#exiting].map((slot) => slot.exited));
  }

  /** Resolves with the decoder once it has decoded its warm-up image; rejects if it cannot. */
  #spawn(): Promise<Slot> {
    const data: DecoderProcessData = {
      ...(this.#opts.model !== undefined && { model: this.#opts.model }),
      inputSize: this.#opts.inputSize,
      limits: this.#opts.limits,
      jpegDecoder: this.#opts.jpegDecoder,
      maxTiles: this.#opts.maxTiles ?? SETTINGS.MAX_TILES.default,
      maxFramesScored: this.#opts.maxFramesScored ?? SETTINGS.MAX_FRAMES_SCORED.default,
      pdq: this.#opts.pdq ?? false,
    };
    const child = fork(fileURLToPath(this.#opts.entry ?? ENTRY), [JSON.stringify(data)], {
      serialization: 'advanced',
      execArgv: EXEC_ARGV,
      env: { ...process.env, MALLOC_ARENA_MAX: '2' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const slot: Slot = { child, ready: false, job: undefined, exited, ending: false, timers: [] };
    this.#slots.add(slot);
    return new Promise<Slot>((resolve, reject) => {
      child.on('message', (reply: DecodeReply | { ready: true } | { fatal: string }) => {
        if ('ready' in reply) {
          slot.ready = true;
          this.#failedUntil = 0;
          this.#dispatch();
          return resolve(slot);
        }
        if ('fatal' in reply) {
          this.#end(slot);
          return reject(new Error(`decoder process failed to start: ${reply.fatal}`));
        }
        this.#finish(slot, reply);
      });
      // An error event without an exit (the process could not be spawned at all) still ends the slot.
      child.once('error', (err) => this.#lost(slot, err, reject));
      child.once('exit', (code, signal) =>
        this.#lost(slot, new Error(`decoder process exited (${signal ?? `code ${code}`})`), reject),
      );
    });
  }

  /**
   * Ends a decoder the pool no longer wants (idle, killed, closing): SIGKILL, out of the pool at once,
   * its pid listed until the process has exited.
   */
  #end(slot: Slot): void {
    if (!this.#slots.delete(slot)) return;
    for (const timer of slot.timers) clearTimeout(timer);
    slot.timers = [];
    slot.ending = true;
    this.#exiting.add(slot);
    void slot.exited.then(() => this.#exiting.delete(slot));
    slot.child.kill('SIGKILL');
  }

  /** A decoder that ended without being told to: its image gets 503 (refunded), the next image a fresh one. */
  #lost(slot: Slot, cause: Error, rejectStart: (err: Error) => void): void {
    if (!this.#slots.delete(slot)) return;
    if (!slot.ready) {
      rejectStart(cause);
      return;
    }
    this.#settle(slot)?.reject(
      new ApiError('UNAVAILABLE', 'Decoding failed; try again', { 'retry-after': '1' }, cause),
    );
    this.#replaced(cause);
  }

  /** Logs a decoder lost or killed; the images waiting get a fresh one (#dispatch starts it). */
  #replaced(cause: Error): void {
    if (this.#closed) return;
    this.#opts.onProcessError?.(cause);
    this.#dispatch();
  }

  /** Takes the slot's job off it (timers cleared), for the caller to answer. */
  #settle(slot: Slot): Job | undefined {
    for (const timer of slot.timers) clearTimeout(timer);
    slot.timers = [];
    const job = slot.job;
    slot.job = undefined;
    return job;
  }

  /**
   * Ends a decoder holding an image too long: SIGKILL, its image answered `error`, its memory reported
   * held until the process has exited.
   */
  #kill(slot: Slot, error: ApiError): void {
    if (!this.#slots.has(slot)) return;
    const job = this.#settle(slot);
    this.#end(slot);
    job?.stillHeld?.(slot.exited);
    job?.reject(error);
    this.#replaced(error.cause instanceof Error ? error.cause : new Error(error.message));
  }

  #watch(slot: Slot, job: Job): void {
    const { deadlineMs } = this.#opts;
    const { cpuLimitMs } = job;
    const pid = slot.child.pid ?? 0;
    const cpuAtStart = processCpuMs(pid);
    const overCpu = () =>
      new ApiError(
        'UNDECODABLE',
        `Undecodable image: decoding it took over ${cpuLimitMs / 1000} s of CPU time, more than any ordinary image of its size needs`,
        {},
        new Error(`decoder killed: image ${job.id} over the ${cpuLimitMs} ms CPU limit`),
      );
    const poll = () => {
      const now = processCpuMs(pid);
      if (cpuAtStart !== undefined && now !== undefined && now - cpuAtStart > cpuLimitMs)
        return this.#kill(slot, overCpu());
      slot.timers[0] = setTimeout(poll, CPU_POLL_MS);
    };
    if (cpuAtStart !== undefined) slot.timers[0] = setTimeout(poll, Math.min(CPU_POLL_MS, cpuLimitMs));
    slot.timers[1] = setTimeout(() => {
      // The CPU is read once more: a decode that has used its limit by now is the image's doing.
      const now = processCpuMs(pid);
      if (cpuAtStart !== undefined && now !== undefined && now - cpuAtStart > cpuLimitMs)
        return this.#kill(slot, overCpu());
      // Past the deadline on its own image: its cost, charged like any answer (a busy host is what
      // an attacker makes; docs/isolation-and-charging.md).
      this.#kill(
        slot,
        new ApiError(
          'UNDECODABLE',
          `Undecodable image: decoding it did not finish within ${deadlineMs / 1000} s`,
          {},
          new Error(`decoder killed: image ${job.id} past the ${deadlineMs} ms deadline`),
        ),
      );
    }, deadlineMs);
  }

  #dispatch(): void {
    if (this.#closed) return;
    let heavy = 0;
    for (const slot of this.#slots) if (slot.job?.heavy) heavy += 1;
    // Jobs no decoder may take yet, but a new one could (a heavy job past #maxHeavy waits for a heavy one).
    let unserved = 0;
    for (let i = 0; i < this.#queue.length; ) {
      const job = this.#queue[i] as Job;
      if (job.heavy && heavy >= this.#maxHeavy) {
        i++;
        continue;
      }
      const slot = this.#freeSlot();
      if (!slot) {
        unserved += 1;
        i++;
        continue;
      }
      this.#queue.splice(i, 1);
      if (job.heavy) heavy += 1;
      slot.job = job;
      for (const timer of slot.timers) clearTimeout(timer);
      slot.timers = [];
      this.#watch(slot, job);
      const request: DecodeRequest = {
        id: job.id,
        bytes: job.bytes,
        probed: job.probed,
        heavy: job.heavy,
        maxFramesScored: job.maxFramesScored,
        ...(job.pdq !== undefined && { pdq: job.pdq }),
      };
      slot.child.send(request);
      // Sent as a serialized copy: the caller's upload is freed now, not at the next collection (a 50 MB
      // body is external memory that brings on a full one).
      releaseBuffer(job.bytes);
    }
    this.#startFor(unserved);
    for (const slot of this.#slots) if (slot.ready && !slot.job && slot.timers.length === 0) this.#idle(slot);
  }

  /** Starts decoders for `unserved` waiting images, beside those starting already, up to `processes`. */
  #startFor(unserved: number): void {
    let starting = 0;
    for (const slot of this.#slots) if (!slot.ready) starting += 1;
    let wanted = Math.min(unserved - starting, this.#opts.processes - this.#slots.size);
    if (wanted <= 0) return;
    if (performance.now() < this.#failedUntil) {
      // The last decoder could not start: images no running decoder can take get 503 now rather
      // than wait for one that may never come.
      if (this.#slots.size === 0) this.#refuseWaiting();
      return;
    }
    for (; wanted > 0; wanted--) {
      this.#spawn().catch((err: Error) => {
        this.#failedUntil = performance.now() + RESPAWN_AFTER_MS;
        this.#opts.onProcessError?.(err);
        if (this.#slots.size === 0) this.#refuseWaiting();
      });
    }
  }

  #refuseWaiting(): void {
    for (const job of this.#queue.splice(0))
      job.reject(new ApiError('UNAVAILABLE', 'Decoding failed; try again', { 'retry-after': '1' }));
  }

  /** A decoder without an image ends after `idleMs` without one. */
  #idle(slot: Slot): void {
    const timer = setTimeout(() => {
      if (!slot.job) this.#end(slot);
    }, this.#opts.idleMs ?? DEFAULT_IDLE_MS);
    timer.unref();
    slot.timers = [timer];
  }

  #freeSlot(): Slot | undefined {
    for (const slot of this.#slots) if (slot.ready && !slot.job) return slot;
    return undefined;
  }

  #finish(slot: Slot, reply: DecodeReply): void {
    if (slot.job?.id !== reply.id) return;
    const job = this.#settle(slot) as Job;
    if (reply.ok) {
      const { tensor, pdq, decodeStartedAt, decodeMs } = reply;
      job.resolve({ tensor, ...(pdq && { pdq }), decodeStartedAt, decodeMs });
    } else job.reject(errorFromReply(reply));
    this.#dispatch();
  }
}
