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
