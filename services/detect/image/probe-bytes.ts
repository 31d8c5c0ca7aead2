// What the header parsers of every format share (probe.ts): bounds-checked little- and big-endian
// reads, where any read out of range throws HeaderError, and the dimensions a parser returns.

import type { ProbedImage } from './types.ts';

/** A header that cannot be read: probe.ts answers it with 4005. */
export class HeaderError extends Error {}

/**
 * A walk that passed its bound (chunks, segments, blocks no real file has): 4005 like any HeaderError,
 * but also final for every longer file that begins with the same bytes — the walks count items in file
 * order and throw this only after visiting each of them inside the data, so what follows cannot change
 * it. That is what lets a body be refused while it still streams in (streamed-header.ts).
 */
export class WalkBoundError extends HeaderError {}

/** Bounds-checked little/big-endian reads; any out-of-range read throws HeaderError (→ 4005). */
export class Bytes {
  constructor(readonly b: Uint8Array) {}
  get length(): number {
    return this.b.length;
  }
  has(offset: number, n: number): boolean {
    return offset >= 0 && n >= 0 && offset + n <= this.b.length;
  }
  need(offset: number, n: number, what: string): void {
    if (!this.has(offset, n)) throw new HeaderError(`truncated before the ${what}`);
  }
  u8(o: number): number {
    const v = this.b[o];
    if (v === undefined || o < 0) throw new HeaderError('truncated header');
    return v;
  }
  u16le(o: number): number {
    return this.u8(o) | (this.u8(o + 1) << 8);
  }
  u16be(o: number): number {
    return (this.u8(o) << 8) | this.u8(o + 1);
  }
  u24le(o: number): number {
    return this.u8(o) | (this.u8(o + 1) << 8) | (this.u8(o + 2) << 16);
  }
  u32le(o: number): number {
    return (this.u8(o) | (this.u8(o + 1) << 8) | (this.u8(o + 2) << 16) | (this.u8(o + 3) << 24)) >>> 0;
  }
  u32be(o: number): number {
    return ((this.u8(o) << 24) | (this.u8(o + 1) << 16) | (this.u8(o + 2) << 8) | this.u8(o + 3)) >>> 0;
  }
  i32le(o: number): number {
    return this.u32le(o) | 0;
  }
  ascii(o: number, n: number): string {
    let s = '';
    for (let i = 0; i < n; i++) s += String.fromCharCode(this.u8(o + i));
    return s;
  }
}

/** What a format's header parser reads: the size of the first frame / page as stored, and the frames. */
export type Dims = Omit<ProbedImage, 'format'>;

/**
 * A header walk that pauses (yields) every so often: run at once by runWalk, or in slices by
 * walkInSlices so that a long walk does not hold the event loop (health probes answer beside it).
 */
export type Walk<T> = Generator<void, T, void>;

/** Runs a walk to its end without pausing. */
export function runWalk<T>(walk: Walk<T>): T {
  for (;;) {
    const step = walk.next();
    if (step.done) return step.value;
  }
}

/** The longest the walks run, all of them together, before they let the event loop turn. */
const WALK_SLICE_MS = 5;

interface Walking {
  walk: Walk<unknown>;
  resolve: (value: unknown) => void;
  reject: (reason: unknown) => void;
}

/**
 * Runs walks in slices that share one budget per turn of the event loop: however many uploads are
 * walked at once, the walks together run at most `sliceMs` (and one step) before the loop turns — not
 * `sliceMs` each, which four concurrent 4.3 M-chunk PNGs made four slices back to back in every turn.
 * A walk starts at once if this turn's budget is not spent; the unfinished one that spent it goes to
 * the back of the queue, so that concurrent walks take the turns in rotation.
 */
export class WalkScheduler {
  readonly #queue: Walking[] = [];
  /** When this turn's walking began; NaN until a walk runs in the turn. */
  #turnStarted = Number.NaN;
  #renewing = false;
  /** The walk that spent this turn's budget and is not finished. */
  #spentBy: Walking | undefined;

  constructor(
    readonly sliceMs = WALK_SLICE_MS,
    readonly now: () => number = () => performance.now(),
    /** Runs its callback in the next turn of the event loop (setImmediate: after its I/O and timers). */
    readonly nextTurn: (callback: () => void) => void = (callback) => setImmediate(callback),
  ) {}

  run<T>(walk: Walk<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ walk, resolve: resolve as (value: unknown) => void, reject });
      this.#work();
    });
  }

  #work(): void {
    if (Number.isNaN(this.#turnStarted)) this.#turnStarted = this.now();
    let stepped: Walking | undefined;
    while (this.#queue.length > 0 && this.now() - this.#turnStarted < this.sliceMs) {
      const head = this.#queue[0] as Walking;
      stepped = head;
      let step: IteratorResult<void, unknown>;
      try {
        step = head.walk.next();
      } catch (err) {
        this.#queue.shift();
        head.reject(err);
        continue;
      }
      if (step.done) {
        this.#queue.shift();
        head.resolve(step.value);
      }
    }
    if (stepped !== undefined && this.#queue[0] === stepped) this.#spentBy = stepped;
    // A new budget next turn, and no more in this one (even if the queue is empty now).
    if (!this.#renewing) {
      this.#renewing = true;
      this.nextTurn(() => {
        this.#renewing = false;
        this.#turnStarted = Number.NaN;
        // The walk that spent the last budget, unfinished, waits behind the others.
        if (this.#queue[0] === this.#spentBy && this.#queue.length > 1)
          this.#queue.push(this.#queue.shift() as Walking);
        this.#spentBy = undefined;
        if (this.#queue.length > 0) this.#work();
      });
    }
  }
}

const walks = new WalkScheduler();

/** Runs a walk in slices (the process's one WalkScheduler), so that no walk holds the event loop. */
export function walkInSlices<T>(walk: Walk<T>): Promise<T> {
  return walks.run(walk);
}

/**
 * A walk's result (or why it failed) kept per buffer while the buffer lives, so that the walk runs once:
 * in slices before the probe (`prefill`, walkInSlices), then read at once by the probe and the estimate
 * (`get`).
 */
export class WalkCache<T> {
  readonly #done = new WeakMap<Uint8Array, T | Error>();
  constructor(readonly walk: (bytes: Uint8Array) => Walk<T>) {}

  get(bytes: Uint8Array): T {
    let result = this.#done.get(bytes);
    if (result === undefined) {
      try {
        result = runWalk(this.walk(bytes));
      } catch (err) {
        result = err instanceof Error ? err : new Error(String(err));
      }
      this.#done.set(bytes, result);
    }
    if (result instanceof Error) throw result;
    return result;
  }

  /** Runs the walk once for `bytes`, keeping its result; returns why it failed (undefined: it did not). */
  *prefill(bytes: Uint8Array): Walk<Error | undefined> {
    let result = this.#done.get(bytes);
    if (result === undefined) {
      try {
        result = yield* this.walk(bytes);
      } catch (err) {
        result = err instanceof Error ? err : new Error(String(err));
      }
      this.#done.set(bytes, result);
    }
    return result instanceof Error ? result : undefined;
  }
}
