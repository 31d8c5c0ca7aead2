// What the header parsers of every format share (probe.ts): bounds-checked little- and big-endian
// reads, where any read out of range throws HeaderError, and the dimensions a parser returns.

import type { ProbedImage } from './types.ts';

/** A header that cannot be read: probe.ts answers it with 4005. */
export class HeaderError extends Error {}

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

/** The longest a walk runs before it lets the event loop turn. */
const WALK_SLICE_MS = 5;

/** Runs a walk, letting the event loop turn whenever it has run WALK_SLICE_MS since the last turn. */
export async function walkInSlices<T>(walk: Walk<T>): Promise<T> {
  let since = performance.now();
  for (;;) {
    const step = walk.next();
    if (step.done) return step.value;
    if (performance.now() - since >= WALK_SLICE_MS) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      since = performance.now();
    }
  }
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

  *prefill(bytes: Uint8Array): Walk<void> {
    if (this.#done.has(bytes)) return;
    try {
      this.#done.set(bytes, yield* this.walk(bytes));
    } catch (err) {
      this.#done.set(bytes, err instanceof Error ? err : new Error(String(err)));
    }
  }
}
