// A fixed pool of decoder processes (decoder-process.ts), each decoding ONE image at a time into its
// model input; inference stays in the scoring worker threads (worker-pool-scorer.ts), which are then
// never terminated in the middle of an ONNX run. Decoding is the step whose cost depends on what the
// image is, so it is the step that may be killed:
//
// - an image whose decode has used more CPU time than any ordinary image of its size needs
//   (decodeCpuLimitMs, at most `cpuLimitMs`) is killed there (SIGKILL) and answered 4005: its cost is
//   what it is, the same on an idle machine — the sender is charged for it
//   (docs/isolation-and-charging.md);
// - an image still decoding `deadlineMs` after it was handed over, without having used that CPU (the
//   machine was too busy to give it any), is killed too and answered 503: not its fault, refunded;
// - a process that dies on its own takes only its own image down (503, refunded: one image at a time,
//   but the kernel's OOM killer chooses by size, not by blame).
//
// The killed process is replaced at once, and its image's memory is reported (`stillHeld`) as held
// until the process has really exited, so the work gate does not admit the next image on top of it.
// CPU time is read from /proc/<pid>/stat (the process's threads together, libvips' included); where
// there is no /proc only the wall deadline applies.

import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ApiError } from '../../../lib/common/errors.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import type { ModelChoice } from '../../../lib/policy/model-catalogue.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import type { DecodeReply, DecodeRequest, DecoderProcessData } from './decoder-process.ts';
import type { StillHeld } from './image-scorer.ts';
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
export function decodeCpuLimitMs(byteLength: number, probed: ProbedImage, capMs: number): number {
  const ordinary =
    ORDINARY_DECODE_FLOOR_MS +
    (probed.width * probed.height * ORDINARY_DECODE_NS_PER_PIXEL + byteLength * ORDINARY_DECODE_NS_PER_BYTE) /
      1e6;
  return Math.min(capMs, Math.ceil(ordinary));
}

/**
 * An image allowed more CPU than this (~7.5 MP and up) is heavy: like a large one, it is held by all
 * decoders but one, so that a file built to cost its whole limit cannot take every decoder.
 */
const HEAVY_DECODE_CPU_MS = 1_000;

/** How long a decoder that failed to start waits before the next try. */
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
  processes: number;
  /** Whose model input to make (an ensemble: each member's, one after another). */
  model?: ModelChoice;
  inputSize: number;
  limits: DimensionLimits;
  jpegDecoder: JpegDecoder;
  /** Tiles a long frame is scored as, at most, after its margins are trimmed (MAX_TILES; default: its default). */
  maxTiles?: number;
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
  readonly #slots = new Set<Slot>();
  #nextId = 1;
  #closed = false;

  private constructor(opts: DecoderPoolOptions) {
    this.#opts = opts;
    this.#maxHeavy = Math.max(1, opts.processes - 1);
  }

  /** Resolves once every decoder has decoded its warm-up image; rejects if any cannot. */
  static async create(opts: DecoderPoolOptions): Promise<DecoderPool> {
    const pool = new DecoderPool(opts);
    try {
      await Promise.all(Array.from({ length: opts.processes }, () => pool.#spawn()));
    } catch (err) {
      await pool.close();
      throw err;
    }
    return pool;
  }

  /** Ready while a decoder can take an image. */
  get ready(): boolean {
    for (const slot of this.#slots) if (slot.ready) return true;
    return false;
  }

  /** The decoders' process ids (the bench sums their memory with the server's). */
  get pids(): number[] {
    return [...this.#slots].flatMap((slot) => (slot.child.pid === undefined ? [] : [slot.child.pid]));
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
  ): Promise<DecodedImage> {
    if (this.#closed) return Promise.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    return new Promise<DecodedImage>((resolve, reject) => {
      const cpuLimitMs = decodeCpuLimitMs(bytes.byteLength, probed, this.#opts.cpuLimitMs);
      const heavy = large || cpuLimitMs > HEAVY_DECODE_CPU_MS;
      this.#queue.push({ id: this.#nextId++, bytes, probed, heavy, cpuLimitMs, stillHeld, resolve, reject });
      this.#dispatch();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const job of this.#queue.splice(0)) job.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
    const slots = [...this.#slots];
    this.#slots.clear();
    for (const slot of slots) {
      this.#settle(slot)?.reject(new ApiError('UNAVAILABLE', 'Scorer is shut down'));
      slot.ending = true;
      slot.child.kill('SIGKILL');
    }
    await Promise.all(slots.map((slot) => slot.exited));
  }

  #spawn(): Promise<void> {
    const data: DecoderProcessData = {
      ...(this.#opts.model !== undefined && { model: this.#opts.model }),
      inputSize: this.#opts.inputSize,
      limits: this.#opts.limits,
      jpegDecoder: this.#opts.jpegDecoder,
      maxTiles: this.#opts.maxTiles ?? SETTINGS.MAX_TILES.default,
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
    return new Promise<void>((resolve, reject) => {
      child.on('message', (reply: DecodeReply | { ready: true } | { fatal: string }) => {
        if ('ready' in reply) {
          slot.ready = true;
          this.#dispatch();
          return resolve();
        }
        if ('fatal' in reply) {
          this.#slots.delete(slot);
          slot.ending = true;
          child.kill('SIGKILL');
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

  /** A decoder that ended without being told to: its image gets 503 (refunded), a fresh one replaces it. */
  #lost(slot: Slot, cause: Error, rejectStart: (err: Error) => void): void {
    if (!this.#slots.delete(slot)) return;
    if (!slot.ready) {
      rejectStart(cause);
      return;
    }
    this.#settle(slot)?.reject(
      new ApiError('UNAVAILABLE', 'Decoding failed; try again', { 'retry-after': '1' }, cause),
    );
    this.#replace(cause);
  }

  #replace(cause: Error): void {
    if (this.#closed) return;
    this.#opts.onProcessError?.(cause);
    this.#spawn()
      .then(() => this.#dispatch())
      // A decoder that cannot start now is tried again (each failure logged), so the pool does not
      // shrink for good.
      .catch((err: Error) => setTimeout(() => this.#replace(err), RESPAWN_AFTER_MS).unref());
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
   * held until the process has exited, a fresh decoder in its place.
   */
  #kill(slot: Slot, error: ApiError): void {
    if (!this.#slots.delete(slot)) return;
    const job = this.#settle(slot);
    slot.ending = true;
    slot.child.kill('SIGKILL');
    job?.stillHeld?.(slot.exited);
    job?.reject(error);
    this.#replace(error.cause instanceof Error ? error.cause : new Error(error.message));
    this.#dispatch();
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
      this.#kill(
        slot,
        new ApiError(
          'UNAVAILABLE',
          `Scoring did not finish within ${deadlineMs / 1000} s; try again`,
          { 'retry-after': '1' },
          new Error(`decoder killed: image ${job.id} past the ${deadlineMs} ms deadline`),
        ),
      );
    }, deadlineMs);
  }

  #dispatch(): void {
    for (let i = 0; i < this.#queue.length; ) {
      const job = this.#queue[i] as Job;
      const slot = this.#slotFor(job);
      if (!slot) {
        i++;
        continue;
      }
      this.#queue.splice(i, 1);
      slot.job = job;
      this.#watch(slot, job);
      const request: DecodeRequest = { id: job.id, bytes: job.bytes, probed: job.probed };
      slot.child.send(request);
    }
  }

  #slotFor(job: Job): Slot | undefined {
    let heavy = 0;
    let free: Slot | undefined;
    for (const slot of this.#slots) {
      if (slot.job?.heavy) heavy += 1;
      if (slot.ready && !slot.job) free ??= slot;
    }
    if (job.heavy && heavy >= this.#maxHeavy) return undefined;
    return free;
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
