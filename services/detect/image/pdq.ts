// Meta's PDQ perceptual hash (ThreatExchange pdq/cpp/hashing/pdqhashing.cpp and downscaling.cpp), as
// the `pdqhash` Python bindings (0.2.8) run it and `threatexchange` (1.2.17) formats it:
//
//   luma = float32(0.299 R + 0.587 G + 0.114 B)   in doubles first: pdqhash computes it with numpy
//   Jarosz filter: box along rows, box along columns, twice (float32 running sums), window ⌈dim / 128⌉
//   decimate to 64×64 (pixel centres), quality from its gradients, DCT to 16×16, bit = value > median
//
// Every float32 operation of the reference is repeated here with the same operands in the same order
// (a Float32Array store or Math.fround after each): a double operation rounded to float32 gives the
// float32 result exactly for +, −, ×, ÷, so the hash is bit for bit pdqhash's (test: pdq-parity).
//
// The filter is streamed: rows go in one at a time (PdqRows.push) and only a window of rows is held.
// The second column pass, the only one whose every output is not needed, runs on the 64 sampled
// columns alone. The native addon holds the same filter in C (libjpeg/pdq-downsample.c, ~10× faster,
// and fed by the JPEG fast path's decoder as it decodes); this one serves where the addon is not built.
// Both are held to the reference by pdq-parity.test.ts. From the 64×64 downsample on (quality, DCT,
// median, the dihedral variants) there is one implementation, here.
//
// A side of 1024 pixels or more is first averaged over blocks (pdqReduce), so that the filter reads
// 512-1023 pixels a side whatever the photo: "The two-pass Jarosz filter is prohibitively expensive for
// larger images" (Meta's own C++ hasher, pdq/cpp/io/pdqio.cpp, which resizes any frame over 512 a side to
// 512 × 512 by nearest neighbour for it). Not that resize: over the corpus it moves a hash a median 11
// bits from the hash of the frame itself (threatexchange's Python hasher's, HMA's), up to 124 for a flag
// of flat stripes, and stretches every 600 × 450 photo; the blocks leave every frame under 1024 pixels a
// side as it is (bit for bit threatexchange's hash) and move the larger ones' at most 24 bits, most
// under 10 (pdq-parity.test.ts; docs/hash-matching.md).

import { libjpegUnavailable, pdqDownsample } from './libjpeg/jpeg-tensor.ts';

/** A PDQ hash and its quality (0–100; below 50 Meta deems it too unreliable to match). */
export interface PdqResult {
  /** 64 lowercase hex digits: word 15 first, as threatexchange writes it. */
  hash: string;
  quality: number;
}

const SIDE = 64;
const MIN_HASHABLE_DIM = 5;

/** A side of twice this or more is averaged over blocks of ⌊side / PDQ_REDUCE_SIDE⌋ pixels (pdqReduce). */
export const PDQ_REDUCE_SIDE = 512;

/** The largest block side: 257 × 255 fits 16 bits (pdq-downsample.c sums a block's columns in 16 bits). */
export const PDQ_MAX_BLOCK = 257;

/** The blocks pdqReduce averages over, and the size the filter then reads. */
export function pdqBlocks(width: number, height: number, reduceSide: number) {
  const along = (side: number) =>
    reduceSide > 0 && side >= 2 * reduceSide ? Math.min(Math.floor(side / reduceSide), PDQ_MAX_BLOCK) : 1;
  const kx = along(width);
  const ky = along(height);
  return { kx, ky, width: Math.floor(width / kx), height: Math.floor(height / ky) };
}

/**
 * The frame the filter reads: a side of 2 × reduceSide or more averaged over blocks of k = ⌊side /
 * reduceSide⌋ pixels, at most PDQ_MAX_BLOCK (so 512-1023 pixels remain, short of sides over 131,000
 * pixels), each channel the block's sum over its pixel count, rounded half up, to 8 bits; the right and
 * bottom remainders (under k pixels) dropped. The frame itself otherwise. pdq-downsample.c does the same
 * row by row; pdq-reference.py redoes it in numpy.
 */
export function pdqReduce(
  rgb: Uint8Array,
  width: number,
  height: number,
  reduceSide: number,
): { rgb: Uint8Array; width: number; height: number } {
  const { kx, ky, ...size } = pdqBlocks(width, height, reduceSide);
  if (kx * ky === 1) return { rgb, width, height };
  const sums = new Uint32Array(size.width * 3);
  const out = new Uint8Array(size.width * size.height * 3);
  const n = kx * ky;
  for (let y = 0; y < size.height; y++) {
    sums.fill(0);
    for (let dy = 0; dy < ky; dy++) {
      let p = (y * ky + dy) * width * 3;
      for (let x = 0; x < size.width; x++)
        for (let dx = 0; dx < kx; dx++)
          for (let c = 0; c < 3; c++) sums[x * 3 + c] = (sums[x * 3 + c] as number) + (rgb[p++] as number);
    }
    const o = y * size.width * 3;
    for (let i = 0; i < sums.length; i++) out[o + i] = Math.floor(((sums[i] as number) + (n >> 1)) / n);
  }
  return { rgb: out, ...size };
}

/** Window of each 1-D box pass (downscaling.cpp computeJaroszFilterWindowSize). */
export function jaroszWindow(oldDimension: number): number {
  return Math.floor((oldDimension + 2 * SIDE - 1) / (2 * SIDE));
}

/** One 1-D box pass over a whole vector (box1DFloat, stride 1): out[i] = mean of the window around i. */
function boxRow(input: Float32Array, out: Float32Array, window: number): void {
  const n = input.length;
  const half = (window + 2) >> 1;
  const fround = Math.fround;
  let sum = 0;
  let count = 0;
  let ri = 0;
  let li = 0;
  let oi = 0;
  for (let i = 0; i < half - 1; i++) {
    sum = fround(sum + (input[ri++] as number));
    count++;
  }
  for (let i = 0; i < window - half + 1; i++) {
    sum = fround(sum + (input[ri++] as number));
    count++;
    out[oi++] = sum / count;
  }
  for (let i = 0; i < n - window; i++) {
    sum = fround(sum + (input[ri++] as number));
    sum = fround(sum - (input[li++] as number));
    out[oi++] = sum / count;
  }
  for (let i = 0; i < half - 1; i++) {
    sum = fround(sum - (input[li++] as number));
    count--;
    out[oi++] = sum / count;
  }
}

/** boxRow over two rows at once: the same operations, two independent chains (twice the speed). */
function boxRowPair(
  a: Float32Array,
  b: Float32Array,
  oa: Float32Array,
  ob: Float32Array,
  window: number,
): void {
  const n = a.length;
  const half = (window + 2) >> 1;
  const fround = Math.fround;
  let sa = 0;
  let sb = 0;
  let count = 0;
  let ri = 0;
  let li = 0;
  let oi = 0;
  for (let i = 0; i < half - 1; i++, ri++) {
    sa = fround(sa + (a[ri] as number));
    sb = fround(sb + (b[ri] as number));
    count++;
  }
  for (let i = 0; i < window - half + 1; i++, ri++, oi++) {
    sa = fround(sa + (a[ri] as number));
    sb = fround(sb + (b[ri] as number));
    count++;
    oa[oi] = sa / count;
    ob[oi] = sb / count;
  }
  for (let i = 0; i < n - window; i++, ri++, li++, oi++) {
    sa = fround(sa + (a[ri] as number));
    sb = fround(sb + (b[ri] as number));
    sa = fround(sa - (a[li] as number));
    sb = fround(sb - (b[li] as number));
    oa[oi] = sa / count;
    ob[oi] = sb / count;
  }
  for (let i = 0; i < half - 1; i++, li++, oi++) {
    sa = fround(sa - (a[li] as number));
    sb = fround(sb - (b[li] as number));
    count--;
    oa[oi] = sa / count;
    ob[oi] = sb / count;
  }
}

/** A box pass along rows fed one row at a time, run on pairs of rows; hands each result row on in order. */
class RowBoxPairs {
  readonly #window: number;
  readonly #sink: (row: Float32Array) => void;
  readonly #in: [Float32Array, Float32Array];
  readonly #out: [Float32Array, Float32Array];
  #pending = false;

  constructor(width: number, window: number, sink: (row: Float32Array) => void) {
    this.#window = window;
    this.#sink = sink;
    this.#in = [new Float32Array(width), new Float32Array(width)];
    this.#out = [new Float32Array(width), new Float32Array(width)];
  }

  push(row: Float32Array): void {
    const [a, b] = this.#in;
    const [oa, ob] = this.#out;
    if (!this.#pending) {
      a.set(row);
      this.#pending = true;
      return;
    }
    b.set(row);
    this.#pending = false;
    boxRowPair(a, b, oa, ob, this.#window);
    this.#sink(oa);
    this.#sink(ob);
  }

  /** The last row of an odd count. */
  flush(): void {
    if (!this.#pending) return;
    this.#pending = false;
    boxRow(this.#in[0], this.#out[0], this.#window);
    this.#sink(this.#out[0]);
  }
}

/**
 * The running sums of a box pass down the columns (box1DFloat with stride = width), fed a row at a
 * time. Emits output row `oi` through `emit` as soon as it is known; keeps the last `window` rows
 * (to subtract them) and nothing else.
 */
class ColumnBox {
  readonly #width: number;
  readonly #height: number;
  readonly #window: number;
  readonly #half: number;
  readonly #sums: Float32Array;
  readonly #ring: Float32Array;
  readonly #out: Float32Array;
  readonly #emit: (row: Float32Array, oi: number) => void;
  readonly #wanted: (oi: number) => boolean;
  #rows = 0;
  #count = 0;

  constructor(
    width: number,
    height: number,
    window: number,
    emit: (row: Float32Array, oi: number) => void,
    wanted: (oi: number) => boolean = () => true,
  ) {
    this.#width = width;
    this.#height = height;
    this.#window = window;
    this.#half = (window + 2) >> 1;
    this.#sums = new Float32Array(width);
    this.#ring = new Float32Array(width * window);
    this.#out = new Float32Array(width);
    this.#emit = emit;
    this.#wanted = wanted;
  }

  push(row: Float32Array): void {
    const ri = this.#rows++;
    const w = this.#width;
    const sums = this.#sums;
    const slot = (ri % this.#window) * w;
    const ring = this.#ring;
    const oi = ri - (this.#half - 1);
    const emit = oi >= 0 && this.#wanted(oi);
    const out = this.#out;
    const fround = Math.fround;
    if (ri < this.#window) {
      // Phases 1 and 2: the window grows.
      const count = ++this.#count;
      for (let j = 0; j < w; j++) {
        const v = row[j] as number;
        const sum = fround((sums[j] as number) + v);
        sums[j] = sum;
        ring[slot + j] = v;
        if (emit) out[j] = sum / count;
      }
    } else {
      // Phase 3: add the new row, then subtract the one `window` rows above it (in that order); the
      // row in its ring slot is replaced by the new one in the same pass.
      const count = this.#count;
      for (let j = 0; j < w; j++) {
        const v = row[j] as number;
        const sum = fround(fround((sums[j] as number) + v) - (ring[slot + j] as number));
        sums[j] = sum;
        ring[slot + j] = v;
        if (emit) out[j] = sum / count;
      }
    }
    if (emit) this.#emit(out, oi);
  }

  /** Phase 4, after the last row: the window shrinks. */
  finish(): void {
    if (this.#rows !== this.#height) throw new Error(`PDQ: ${this.#rows} rows of ${this.#height} pushed`);
    const w = this.#width;
    const sums = this.#sums;
    let li = this.#height - this.#window;
    for (let oi = this.#height - this.#half + 1; oi < this.#height; oi++, li++) {
      const slot = (li % this.#window) * w;
      for (let j = 0; j < w; j++) sums[j] = (sums[j] as number) - (this.#ring[slot + j] as number);
      this.#count--;
      this.#write(oi);
    }
  }

  #write(oi: number): void {
    if (!this.#wanted(oi)) return;
    const out = this.#out;
    const sums = this.#sums;
    const count = this.#count;
    for (let j = 0; j < this.#width; j++) out[j] = (sums[j] as number) / count;
    this.#emit(out, oi);
  }
}

/** decimateFloat's source index of each of the 64 outputs ("target centers not corners"). */
function sampled(inDimension: number): Int32Array {
  return Int32Array.from({ length: SIDE }, (_, i) => Math.trunc(((i + 0.5) * inDimension) / SIDE));
}

/**
 * PDQ of an image fed row by row, top to bottom (`push` each row of interleaved 8-bit RGB, or a
 * luma row with `pushLuma`), then `result()`.
 */
export class PdqRows {
  readonly width: number;
  readonly height: number;
  readonly #luma: Float32Array;
  readonly #sampledCols: Int32Array;
  readonly #rows1: RowBoxPairs | undefined;
  readonly #rows2: RowBoxPairs | undefined;
  readonly #first: ColumnBox | undefined;
  readonly #second: ColumnBox | undefined;
  readonly #windowAlongRows: number;
  /** The 64×64 downsample, row-major. */
  readonly #buffer64 = new Float32Array(SIDE * SIDE);
  /** 64 × 64 luma rows kept as they are when the image is already 64×64 (the reference copies it). */
  readonly #direct: boolean;
  #row = 0;

  constructor(width: number, height: number) {
    this.width = width;
    this.height = height;
    this.#luma = new Float32Array(width);
    this.#direct = width === SIDE && height === SIDE;
    this.#windowAlongRows = jaroszWindow(width);
    const windowAlongCols = jaroszWindow(height);
    this.#sampledCols = sampled(width);
    if (this.#direct || width < MIN_HASHABLE_DIM || height < MIN_HASHABLE_DIM) return;
    const sampledRows = sampled(height);
    // Output row oi of the second column pass → the 64×64 rows that sample it (several when height < 64).
    const rowsOf = new Map<number, number[]>();
    sampledRows.forEach((r, i) => {
      rowsOf.set(r, [...(rowsOf.get(r) ?? []), i]);
    });
    const cols = this.#sampledCols;
    const picked = new Float32Array(SIDE);
    this.#second = new ColumnBox(
      SIDE,
      height,
      windowAlongCols,
      (row, oi) => {
        for (const i of rowsOf.get(oi) ?? []) this.#buffer64.set(row, i * SIDE);
      },
      (oi) => rowsOf.has(oi),
    );
    const second = this.#second;
    this.#rows2 = new RowBoxPairs(width, this.#windowAlongRows, (row) => {
      for (let j = 0; j < SIDE; j++) picked[j] = row[cols[j] as number] as number;
      second.push(picked);
    });
    const rows2 = this.#rows2;
    this.#first = new ColumnBox(width, height, windowAlongCols, (row) => rows2.push(row));
    const first = this.#first;
    this.#rows1 = new RowBoxPairs(width, this.#windowAlongRows, (row) => first.push(row));
  }

  /** One row of interleaved 8-bit RGB (width × 3 bytes, at `offset` in `rgb`). */
  push(rgb: Uint8Array, offset = 0): void {
    const luma = this.#luma;
    for (let j = 0, p = offset; j < this.width; j++, p += 3) {
      // pdqhash's luma: numpy multiplies uint8 by Python floats in doubles, adds left to right, casts
      // to float32 (the store).
      luma[j] = (rgb[p] as number) * 0.299 + (rgb[p + 1] as number) * 0.587 + (rgb[p + 2] as number) * 0.114;
    }
    this.pushLuma(luma);
  }

  /** One row of float32 luma (width values). */
  pushLuma(luma: Float32Array): void {
    const i = this.#row++;
    if (this.#direct) {
      this.#buffer64.set(luma.subarray(0, SIDE), i * SIDE);
      return;
    }
    this.#rows1?.push(luma);
  }

  /** The 64×64 downsample (zeros under 5 pixels a side). */
  downsample(): Float32Array {
    if (this.width < MIN_HASHABLE_DIM || this.height < MIN_HASHABLE_DIM) return this.#buffer64;
    if (this.#row !== this.height) throw new Error(`PDQ: ${this.#row} rows of ${this.height} pushed`);
    if (this.#rows1 && this.#rows2 && this.#first && this.#second) {
      this.#rows1.flush();
      this.#first.finish();
      this.#rows2.flush();
      this.#second.finish();
    }
    return this.#buffer64;
  }
}

/** What a scored image carries of its PDQ: its hash and quality, and the hashes it matches under. */
export interface ImagePdq extends PdqResult {
  /** The eight dihedral variants (dihedralHashes): a list entry of a rotated or mirrored copy matches one. */
  variants: string[];
}

/** Which implementation of the filter: the addon's (where built) or this file's. */
export type PdqFilter = 'native' | 'js';

/** The addon's filter where it was built, else this file's. */
export const PDQ_FILTER: PdqFilter = libjpegUnavailable() ? 'js' : 'native';

/** The 64×64 downsample of a whole interleaved 8-bit RGB image (pdqReduce first). */
function downsampleOf(
  rgb: Uint8Array,
  width: number,
  height: number,
  filter: PdqFilter,
  reduceSide: number,
): Float32Array {
  const native = filter === 'native' ? pdqDownsample(rgb, width, height, reduceSide) : undefined;
  if (native) return native;
  if (filter === 'native') throw new Error('PDQ: the native addon is not built');
  const frame = pdqReduce(rgb, width, height, reduceSide);
  const rows = new PdqRows(frame.width, frame.height);
  for (let y = 0; y < frame.height; y++) rows.push(frame.rgb, y * frame.width * 3);
  return rows.downsample();
}

/**
 * The hash, quality and dihedral variants of a frame (its size) from the 64×64 downsample made with the
 * reduce side `reduceSide`.
 */
export function pdqOfDownsample(
  buffer64: Float32Array,
  frameWidth: number,
  frameHeight: number,
  reduceSide = PDQ_REDUCE_SIDE,
): ImagePdq {
  const { width, height } = pdqBlocks(frameWidth, frameHeight, reduceSide);
  if (width < MIN_HASHABLE_DIM || height < MIN_HASHABLE_DIM) {
    const zeros = '0'.repeat(64);
    return { hash: zeros, quality: 0, variants: Array.from({ length: 8 }, () => zeros) };
  }
  const dct = dct64To16(buffer64);
  const variants = dihedralHashes(dct);
  return { hash: variants[0] as string, quality: qualityOf(buffer64), variants };
}

/**
 * The PDQ of a decoded frame (interleaved 8-bit RGB), with its dihedral variants, for matching;
 * `reduceSide` 0 hashes the frame itself at any size (as threatexchange's Python hasher does).
 */
export function pdqOfFrame(
  rgb: Uint8Array,
  width: number,
  height: number,
  filter = PDQ_FILTER,
  reduceSide = PDQ_REDUCE_SIDE,
): ImagePdq {
  return pdqOfDownsample(downsampleOf(rgb, width, height, filter, reduceSide), width, height, reduceSide);
}

/** pdqImageDomainQualityMetric: the sum of quantised gradients of the 64×64 downsample. */
function qualityOf(b: Float32Array): number {
  const fround = Math.fround;
  let sum = 0;
  const step = (u: number, v: number) => {
    const d = Math.trunc(fround(fround(fround(u - v) * 100) / 255));
    sum += Math.abs(d);
  };
  for (let i = 0; i < SIDE - 1; i++) {
    for (let j = 0; j < SIDE; j++) step(b[i * SIDE + j] as number, b[(i + 1) * SIDE + j] as number);
  }
  for (let i = 0; i < SIDE; i++) {
    for (let j = 0; j < SIDE - 1; j++) step(b[i * SIDE + j] as number, b[i * SIDE + j + 1] as number);
  }
  return Math.min(100, Math.trunc(sum / 90));
}

/** The 16 × 64 DCT matrix (dct_matrix_64): float(sqrt(2/64)) × cos(...) in doubles, stored as float32. */
const DCT = (() => {
  const scale = Math.fround(Math.sqrt(2 / 64));
  const d = new Float32Array(16 * 64);
  for (let i = 0; i < 16; i++) {
    for (let j = 0; j < 64; j++) d[i * 64 + j] = scale * Math.cos((Math.PI / 2 / 64) * (i + 1) * (2 * j + 1));
  }
  return d;
})();

/** dct64To16: B = D A Dᵀ, float32 sums in the reference's order. */
function dct64To16(a: Float32Array): Float32Array {
  const fround = Math.fround;
  const t = new Float32Array(16 * 64);
  for (let i = 0; i < 16; i++) {
    for (let j = 0; j < 64; j++) {
      let sum = 0;
      for (let k = 0; k < 64; k++) {
        sum = fround(sum + fround((DCT[i * 64 + k] as number) * (a[k * 64 + j] as number)));
      }
      t[i * 64 + j] = sum;
    }
  }
  const b = new Float32Array(256);
  for (let i = 0; i < 16; i++) {
    for (let j = 0; j < 16; j++) {
      let sum = 0;
      for (let k = 0; k < 64; k++) {
        sum = fround(sum + fround((t[i * 64 + k] as number) * (DCT[j * 64 + k] as number)));
      }
      b[i * 16 + j] = sum;
    }
  }
  return b;
}

/** Torben's median of float32 values (torben.cpp), with its float32 midpoint. */
function torben(m: Float32Array): number {
  const n = m.length;
  let min = m[0] as number;
  let max = min;
  for (let i = 1; i < n; i++) {
    const v = m[i] as number;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  let less = 0;
  let greater = 0;
  let equal = 0;
  let guess = 0;
  let maxltguess = min;
  let mingtguess = max;
  const half = (n + 1) >> 1;
  for (;;) {
    guess = Math.fround(Math.fround(min + max) / 2);
    less = 0;
    greater = 0;
    equal = 0;
    maxltguess = min;
    mingtguess = max;
    for (let i = 0; i < n; i++) {
      const v = m[i] as number;
      if (v < guess) {
        less++;
        if (v > maxltguess) maxltguess = v;
      } else if (v > guess) {
        greater++;
        if (v < mingtguess) mingtguess = v;
      } else equal++;
    }
    if (less <= half && greater <= half) break;
    if (less > greater) max = maxltguess;
    else min = mingtguess;
  }
  if (less >= half) return maxltguess;
  if (less + equal >= half) return guess;
  return mingtguess;
}

/** pdqBuffer16x16ToBits, formatted as Hash256::format: bit k is bit k & 15 of word k >> 4, word 15 first. */
export function hashOf(dct: Float32Array): string {
  const median = torben(dct);
  const words = new Uint16Array(16);
  for (let k = 0; k < 256; k++) {
    if ((dct[k] as number) > median) words[k >> 4] = (words[k >> 4] as number) | (1 << (k & 15));
  }
  let hex = '';
  for (let w = 15; w >= 0; w--) hex += (words[w] as number).toString(16).padStart(4, '0');
  return hex;
}

/**
 * The eight dihedral variants' hashes from one 16×16 DCT (dct16OriginalTo*), in pdqhash's
 * compute_dihedral order: original, rotate 90, 180, 270, flip x, flip y, flip +1, flip −1.
 * A rotated or mirrored image's hash is (nearly) one of these variants of the original's.
 */
export function dihedralHashes(dct: Float32Array): string[] {
  const variant = (f: (i: number, j: number, a: number, b: Float32Array) => void): string => {
    const b = new Float32Array(256);
    for (let i = 0; i < 16; i++) for (let j = 0; j < 16; j++) f(i, j, dct[i * 16 + j] as number, b);
    return hashOf(b);
  };
  return [
    hashOf(dct),
    variant((i, j, a, b) => {
      b[j * 16 + i] = j & 1 ? a : -a;
    }),
    variant((i, j, a, b) => {
      b[i * 16 + j] = (i + j) & 1 ? -a : a;
    }),
    variant((i, j, a, b) => {
      b[j * 16 + i] = i & 1 ? a : -a;
    }),
    variant((i, j, a, b) => {
      b[i * 16 + j] = i & 1 ? a : -a;
    }),
    variant((i, j, a, b) => {
      b[i * 16 + j] = j & 1 ? a : -a;
    }),
    variant((i, j, a, b) => {
      b[j * 16 + i] = a;
    }),
    variant((i, j, a, b) => {
      b[j * 16 + i] = (i + j) & 1 ? -a : a;
    }),
  ];
}

// Warm-up at load: a decoder process or scoring worker that has just started would otherwise hash its
// first images in V8's interpreter, tens of times slower (hundreds of ms for one photo, enough to pass a
// decode CPU limit). A few small frames get every loop above compiled, in a few ms.
{
  const side = 160;
  const rgb = new Uint8Array(side * side * 3);
  for (let i = 0; i < rgb.length; i++) rgb[i] = (i * 2654435761) >>> 24;
  for (let k = 0; k < 12; k++) pdqOfFrame(rgb, side - (k & 3), side + (k & 1));
}
