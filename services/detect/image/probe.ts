// Header-only probing: width, height and frame count read by small parsers of our own, BEFORE any
// pixel is decoded, then the dimension limits of spec part 8 (DESIGN.md, "dimension checks").
// A decompression bomb (e.g. a 100-byte PNG claiming 65535×65535) is refused here in microseconds and
// never reaches the decoder.
//
// Every parser is guarded: all reads are bounds-checked, every loop advances by at least one byte per
// iteration (or is capped), and nothing but ApiError leaves this module:
//   4005 (UNDECODABLE)          — header truncated before the size, zero or inconsistent dimensions;
//   4004 (DIMENSIONS_EXCEEDED)  — a well-formed header whose size exceeds the limits;
//   4005 (UNDECODABLE)          — a JPEG whose scans would cost more than any real one (more than
//                                 MAX_JPEG_SCANS scans, or MAX_JPEG_SCAN_BLOCKS blocks walked), or with
//                                 other than 1, 3 or 4 components; an animated WebP of more than
//                                 MAX_WEBP_FRAMES frames (docs/image-cost.md).
// Width and height are those of the first frame / page as stored, i.e. before EXIF rotation.
// `checkImageData`, run by decode just before the decoder, asks the next header-only question: can
// the data hold the image its header claims (JPEG: one bit per block; TIFF: first page inside the
// data)? If not: 4005, in microseconds, instead of a grey half-decoded canvas.

import { ApiError, isApiError } from '../../../lib/common/errors.ts';
import {
  JPEG_COMPONENT_COUNTS,
  MAX_JPEG_SCAN_BLOCKS,
  MAX_JPEG_SCANS,
  MAX_WEBP_FRAMES,
} from './image-cost.ts';
import {
  DEFAULT_DIMENSION_LIMITS,
  type DimensionLimits,
  FORMAT_NAMES,
  type ImageFormat,
  type ProbedImage,
} from './types.ts';

/** Pages a TIFF may have (loops are detected explicitly): more is 4005. */
const MAX_TIFF_PAGES = 65_535;

class HeaderError extends Error {}

/** Bounds-checked little/big-endian reads; any out-of-range read throws HeaderError (→ 4005). */
class Bytes {
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

type Dims = Omit<ProbedImage, 'format'>;

// ---------------------------------------------------------------------------------------------- JPEG

/** SOF0–SOF15 minus DHT (C4), JPG (C8) and DAC (CC). */
const JPEG_SOF = new Set([0xc0, 0xc1, 0xc2, 0xc3, 0xc5, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcd, 0xce, 0xcf]);

/** Progressive SOFs (DCT, Huffman and arithmetic). */
export const PROGRESSIVE_SOF: ReadonlySet<number> = new Set([0xc2, 0xc6, 0xca, 0xce]);

/** Arithmetic-coded SOFs: their coder can spend well under a bit on a block, so no size bound applies. */
const JPEG_ARITHMETIC_SOF = new Set([0xc9, 0xca, 0xcb, 0xcd, 0xce, 0xcf]);

/**
 * 8×8 blocks of the largest component of a frame (SOF payload at `p`, after the marker). With Huffman
 * coding every block of a component costs at least one bit (its DC symbol; a Huffman code is never
 * shorter than one bit; lossless frames code every sample, even more), so a file with fewer bits than
 * this cannot hold the image its header claims: libjpeg would "decode" it into a mostly grey canvas,
 * spending time on pixels that were never sent. A header-only lower bound, independent of content:
 * the most compressible real image still needs these bits (measured on the corpus: giant-image.jpg,
 * a nearly flat 20000×14000 baseline JPEG, spends 2.0 bits per block; every other corpus JPEG ≥ 6).
 */
function jpegLargestComponentBlocks(r: Bytes, p: number, width: number, height: number): number {
  const components = r.u8(p + 7);
  const sampling: Array<[number, number]> = [];
  for (let i = 0; i < components; i++) {
    if (!r.has(p + 8 + i * 3, 3)) break;
    const hv = r.u8(p + 8 + i * 3 + 1);
    sampling.push([Math.max(1, hv >> 4), Math.max(1, hv & 0x0f)]);
  }
  if (sampling.length === 0) sampling.push([1, 1]);
  const hMax = Math.max(...sampling.map(([h]) => h));
  const vMax = Math.max(...sampling.map(([, v]) => v));
  let most = 0;
  for (const [h, v] of sampling) {
    const blocks =
      Math.ceil(Math.ceil((width * h) / hMax) / 8) * Math.ceil(Math.ceil((height * v) / vMax) / 8);
    most = Math.max(most, blocks);
  }
  return most;
}

/** Offset of the first frame header's payload (after its marker) and the marker. */
function findJpegFrame(r: Bytes): { marker: number; p: number } {
  if (r.u8(0) !== 0xff || r.u8(1) !== 0xd8) throw new HeaderError('missing SOI marker');
  let p = 2;
  const n = r.length;
  for (;;) {
    // Like libjpeg, tolerate garbage before a marker and any number of 0xFF fill bytes.
    while (p < n && r.b[p] !== 0xff) p++;
    while (p < n && r.b[p] === 0xff) p++;
    if (p >= n) throw new HeaderError('no frame header (SOFn) before the end of the data');
    const marker = r.u8(p);
    p += 1;
    if (marker === 0x00 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) continue; // no length
    if (marker === 0xd8 || marker === 0xd9 || marker === 0xda) {
      throw new HeaderError('no frame header (SOFn) before the first scan');
    }
    r.need(p, 2, 'segment length');
    const length = r.u16be(p);
    if (length < 2) throw new HeaderError('invalid segment length');
    if (JPEG_SOF.has(marker)) return { marker, p };
    p += length;
  }
}

/** What decoding a JPEG will cost, from its markers (entropy-coded data skipped, never decoded). */
export interface JpegStructure {
  /** The first frame's SOF marker. */
  marker: number;
  /** Each component's id and sampling factors (1..4). */
  components: Array<{ id: number; h: number; v: number }>;
  /** Blocks of each component, padded to whole MCUs (what libjpeg allocates). */
  componentBlocks: number[];
  scans: number;
  /** 8×8 blocks the scans walk together: each scan walks every block of each of its components. */
  scanBlocks: number;
  /** Bytes of APPn and COM segments (EXIF, XMP, ICC, IPTC, comments): decoders keep copies. */
  metadataBytes: number;
  /**
   * Whether the scans send every bit of every coefficient of every component (always, with one
   * sequential scan). libjpeg-turbo smooths blocks whose coefficients are incomplete, differently in
   * each release: the fast path declines those (jpeg-decode.c), and is not even tried (decode.ts).
   */
  coefficientsComplete: boolean;
}

const RST_OR_STUFFING = (byte: number) => byte === 0x00 || (byte >= 0xd0 && byte <= 0xd7);

/**
 * Where a scan's entropy-coded data starting at `p` ends: the first FF followed by neither 00 (stuffing),
 * a restart marker nor another FF; the data's length if none. A native search jumps to each FF, as long
 * as they are sparse (about one byte in 256 in real data); where FFs come within 16 bytes of each other
 * the bytes are walked in place, so that 50 MB of stuffed FF 00 pairs cost one pass, not a search call
 * per FF (measured on this machine: 0.4 s against 2.2 s).
 */
function scanEnd(data: Buffer, start: number): number {
  const n = data.length;
  let p = start;
  while (p + 1 < n) {
    p = data.indexOf(0xff, p);
    if (p < 0) return n;
    for (let last = p; p + 1 < n && p - last < 16; p++) {
      if (data[p] !== 0xff) continue;
      last = p;
      const next = data[p + 1] as number;
      if (!RST_OR_STUFFING(next) && next !== 0xff) return p;
    }
  }
  return n;
}

/**
 * Walks every marker of a JPEG up to EOI or the end of the data. An SOS segment is followed by its
 * entropy-coded data, which ends at the first FF not followed by 00 (stuffing) or a restart marker.
 */
export function jpegStructure(bytes: Uint8Array): JpegStructure {
  let structure = walked.get(bytes);
  if (!structure) {
    structure = walkJpeg(bytes);
    walked.set(bytes, structure);
  }
  return structure;
}

/** The walk of each buffer, kept while the buffer lives: probe, estimate and decode all ask. */
const walked = new WeakMap<Uint8Array, JpegStructure>();

function walkJpeg(bytes: Uint8Array): JpegStructure {
  const r = new Bytes(bytes);
  const { marker, p: sofAt } = findJpegFrame(r);
  r.need(sofAt, 8, 'frame size');
  const height = r.u16be(sofAt + 3);
  const width = r.u16be(sofAt + 5);
  const count = r.u8(sofAt + 7);
  const components: JpegStructure['components'] = [];
  for (let i = 0; i < count && r.has(sofAt + 8 + i * 3, 3); i++) {
    const hv = r.u8(sofAt + 8 + i * 3 + 1);
    components.push({
      id: r.u8(sofAt + 8 + i * 3),
      h: Math.min(4, Math.max(1, hv >> 4)),
      v: Math.min(4, Math.max(1, hv & 0x0f)),
    });
  }
  if (components.length === 0) components.push({ id: 1, h: 1, v: 1 });
  const hMax = Math.max(...components.map((c) => c.h));
  const vMax = Math.max(...components.map((c) => c.v));
  const mcuColumns = Math.ceil(width / (8 * hMax));
  const mcuRows = Math.ceil(height / (8 * vMax));
  const componentBlocks = components.map((c) => mcuColumns * c.h * mcuRows * c.v);
  const mostBlocks = Math.max(...componentBlocks);

  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = data.length;
  let scans = 0;
  let scanBlocks = 0;
  let metadataBytes = 0;
  // Per component and coefficient, the point transform of the last scan that sent it (-1: never), as
  // libjpeg's coef_bits: complete when every one is 0.
  const coefficientBits = components.map(() => new Int8Array(64).fill(-1));
  let p = 2;
  while (p < n) {
    while (p < n && data[p] !== 0xff) p++;
    while (p < n && data[p] === 0xff) p++;
    if (p >= n) break;
    const m = data[p] as number;
    p += 1;
    if (m === 0xd9) break; // EOI
    if (m === 0x00 || m === 0x01 || (m >= 0xd0 && m <= 0xd8)) continue; // no length
    if (p + 2 > n) break;
    const length = data.readUInt16BE(p);
    if (length < 2) break;
    if ((m >= 0xe0 && m <= 0xef) || m === 0xfe) metadataBytes += length - 2;
    if (m === 0xda) {
      scans += 1;
      const inScan = p + 2 < n ? (data[p + 2] as number) : 0;
      const band = p + 3 + inScan * 2;
      const ss = band + 2 < n ? (data[band] as number) : 0;
      const se = band + 2 < n ? Math.min(63, data[band + 1] as number) : 63;
      const al = band + 2 < n ? (data[band + 2] as number) & 0x0f : 0;
      const sequential = !PROGRESSIVE_SOF.has(marker);
      for (let i = 0; i < inScan && p + 3 + i * 2 < n; i++) {
        const index = components.findIndex((c) => c.id === data[p + 3 + i * 2]);
        scanBlocks += index >= 0 ? (componentBlocks[index] as number) : mostBlocks;
        const bits = coefficientBits[index];
        if (bits) bits.fill(sequential ? 0 : al, sequential ? 0 : ss, sequential ? 64 : se + 1);
      }
      p = scanEnd(data, p + length);
      if (p + 1 >= n) break;
      continue;
    }
    p += length;
  }
  const coefficientsComplete = coefficientBits.every((bits) => bits.every((b) => b === 0));
  return { marker, components, componentBlocks, scans, scanBlocks, metadataBytes, coefficientsComplete };
}

/** A JPEG whose scans would cost more than any real one: 4005, before any decoding. */
function checkJpegCost(bytes: Uint8Array): void {
  const s = jpegStructure(bytes);
  if (!JPEG_COMPONENT_COUNTS.has(s.components.length)) {
    throw new HeaderError(`${s.components.length} components (1, 3 or 4 are decoded)`);
  }
  if (s.scans > MAX_JPEG_SCANS) {
    throw new HeaderError(
      `${s.scans} scans, over the limit of ${MAX_JPEG_SCANS} (no encoder writes more; each scan is a pass over the image)`,
    );
  }
  if (s.scanBlocks > MAX_JPEG_SCAN_BLOCKS) {
    throw new HeaderError(
      `its ${s.scans} scans walk ${s.scanBlocks} blocks, over the limit of ${MAX_JPEG_SCAN_BLOCKS} (too costly to decode)`,
    );
  }
}

function probeJpeg(r: Bytes): Dims {
  const { p } = findJpegFrame(r);
  r.need(p, 8, 'frame size');
  const height = r.u16be(p + 3);
  const width = r.u16be(p + 5);
  // Height 0 would mean "defined later by a DNL marker", which libjpeg does not support either.
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames: 1 };
}

function checkJpegData(r: Bytes, width: number, height: number): void {
  const { marker, p } = findJpegFrame(r);
  if (JPEG_ARITHMETIC_SOF.has(marker)) return;
  const blocks = jpegLargestComponentBlocks(r, p, width, height);
  if (r.length * 8 < blocks) {
    throw new HeaderError(`${r.length} bytes cannot hold a ${width}x${height} image (truncated or forged)`);
  }
}

// ----------------------------------------------------------------------------------------------- PNG

const PNG_BIT_DEPTHS: Record<number, number[]> = {
  0: [1, 2, 4, 8, 16], // grey
  2: [8, 16], // RGB
  3: [1, 2, 4, 8], // palette
  4: [8, 16], // grey + alpha
  6: [8, 16], // RGBA
};

function probePng(r: Bytes): Dims {
  r.need(0, 8 + 8 + 13, 'IHDR chunk');
  if (r.u32be(8) !== 13 || r.ascii(12, 4) !== 'IHDR')
    throw new HeaderError('first chunk is not a 13-byte IHDR');
  const width = r.u32be(16);
  const height = r.u32be(20);
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  if (width > 0x7fffffff || height > 0x7fffffff) throw new HeaderError('dimension out of range');
  const bitDepth = r.u8(24);
  const colourType = r.u8(25);
  if (!PNG_BIT_DEPTHS[colourType]?.includes(bitDepth)) {
    throw new HeaderError(`invalid bit depth ${bitDepth} for colour type ${colourType}`);
  }
  // APNG: an acTL chunk before the first IDAT gives the frame count. Walk chunk headers only.
  let frames = 1;
  let p = 8 + 8 + 13 + 4;
  while (r.has(p, 8)) {
    const length = r.u32be(p);
    const type = r.ascii(p + 4, 4);
    if (type === 'IDAT' || type === 'IEND' || length > 0x7fffffff) break;
    if (type === 'acTL' && length >= 8 && r.has(p + 8, 8)) {
      const numFrames = r.u32be(p + 8);
      if (numFrames >= 1) frames = numFrames;
      break;
    }
    p += 12 + length;
  }
  return { width, height, frames };
}

/** Chunks a PNG decoder keeps no copy of: the image data (IDAT, APNG frames), the header and the end. */
const PNG_IMAGE_CHUNKS = new Set(['IHDR', 'IDAT', 'fdAT', 'IEND']);

/**
 * Bytes of every other chunk of a PNG (text, ICC profile, EXIF, unknown ones; PLTE and tRNS are small),
 * with their 12 bytes of framing: the decoder reads them into buffers of its own, then libvips copies
 * the text and EXIF into the image's metadata (measured: ~6 bytes of memory per byte of tEXt).
 * Chunk headers only, anywhere in the file (text may follow the image data).
 */
export function pngAncillaryBytes(bytes: Uint8Array): number {
  const r = new Bytes(bytes);
  let total = 0;
  let p = 8;
  while (r.has(p, 8)) {
    const length = r.u32be(p);
    const type = r.ascii(p + 4, 4);
    if (type === 'IEND') break;
    if (!PNG_IMAGE_CHUNKS.has(type)) total += Math.min(length, r.length - p - 8) + 12;
    p += 12 + length;
  }
  return total;
}

// ----------------------------------------------------------------------------------------------- GIF

/** Skips a chain of GIF data sub-blocks; returns the offset after the terminator, or -1 if truncated. */
function skipSubBlocks(r: Bytes, start: number): number {
  let p = start;
  while (p < r.length) {
    const size = r.b[p] ?? 0;
    p += 1 + size;
    if (size === 0) return p;
  }
  return -1;
}

function probeGif(r: Bytes): Dims {
  r.need(0, 13, 'logical screen descriptor');
  const screenWidth = r.u16le(6);
  const screenHeight = r.u16le(8);
  const packed = r.u8(10);
  let p = 13 + (packed & 0x80 ? 3 * (2 << (packed & 7)) : 0);
  // The decoder (libnsgif) grows its canvas to hold every frame, so the size we check and report
  // is the logical screen extended by every frame rectangle.
  let width = screenWidth;
  let height = screenHeight;
  let frames = 0;
  while (p < r.length) {
    const introducer = r.u8(p);
    p += 1;
    if (introducer === 0x3b) break; // trailer
    if (introducer === 0x21) {
      // Extension: label byte, then sub-blocks.
      const end = skipSubBlocks(r, p + 1);
      if (end < 0) break;
      p = end;
      continue;
    }
    if (introducer !== 0x2c) break; // unknown block: the decoder stops here as well
    if (!r.has(p, 9)) {
      if (frames === 0) throw new HeaderError('truncated before the first image descriptor');
      break;
    }
    const left = r.u16le(p);
    const top = r.u16le(p + 2);
    const frameWidth = r.u16le(p + 4);
    const frameHeight = r.u16le(p + 6);
    const framePacked = r.u8(p + 8);
    p += 9;
    if (framePacked & 0x80) p += 3 * (2 << (framePacked & 7));
    p += 1; // LZW minimum code size
    const end = skipSubBlocks(r, p);
    if (end < 0) {
      // A cut-off later frame is tolerated (the frames before it are intact); a cut-off first frame is not.
      if (frames === 0) throw new HeaderError('truncated inside the first frame');
      break;
    }
    p = end;
    frames += 1;
    if (frameWidth > 0 && frameHeight > 0) {
      width = Math.max(width, left + frameWidth);
      height = Math.max(height, top + frameHeight);
    }
  }
  if (frames === 0) throw new HeaderError('no image data');
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames };
}

// ---------------------------------------------------------------------------------------------- WebP

function probeWebp(r: Bytes): Dims {
  r.need(0, 20, 'first chunk');
  const riffEnd = Math.min(r.length, 8 + r.u32le(4));
  const fourcc = r.ascii(12, 4);
  const d = 20; // first chunk's payload
  let width: number;
  let height: number;
  let frames = 1;
  if (fourcc === 'VP8 ') {
    r.need(d, 10, 'VP8 frame header');
    if (r.u8(d + 3) !== 0x9d || r.u8(d + 4) !== 0x01 || r.u8(d + 5) !== 0x2a) {
      throw new HeaderError('bad VP8 start code');
    }
    width = r.u16le(d + 6) & 0x3fff;
    height = r.u16le(d + 8) & 0x3fff;
  } else if (fourcc === 'VP8L') {
    r.need(d, 5, 'VP8L header');
    if (r.u8(d) !== 0x2f) throw new HeaderError('bad VP8L signature');
    const bits = r.u32le(d + 1);
    width = (bits & 0x3fff) + 1;
    height = ((bits >>> 14) & 0x3fff) + 1;
  } else if (fourcc === 'VP8X') {
    r.need(d, 10, 'VP8X header');
    const flags = r.u8(d);
    width = r.u24le(d + 4) + 1;
    height = r.u24le(d + 7) + 1;
    if (flags & 0x02) {
      // Animated: count ANMF chunks at the top level of the RIFF container.
      frames = 0;
      let p = 12;
      while (p + 8 <= riffEnd) {
        const size = r.u32le(p + 4);
        if (r.ascii(p, 4) === 'ANMF') frames += 1;
        p += 8 + size + (size & 1);
      }
      if (frames === 0) throw new HeaderError('animated WebP without frames');
    }
  } else {
    throw new HeaderError(`unknown first chunk "${fourcc.replace(/[^\x20-\x7e]/g, '?')}"`);
  }
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames };
}

// ----------------------------------------------------------------------------------------------- BMP

function probeBmp(r: Bytes): Dims {
  r.need(0, 18, 'DIB header size');
  if (r.u8(0) !== 0x42 || r.u8(1) !== 0x4d) throw new HeaderError('missing BM signature');
  const dibSize = r.u32le(14);
  let width: number;
  let height: number;
  if (dibSize === 12) {
    r.need(14, 12, 'BITMAPCOREHEADER');
    width = r.u16le(18);
    height = r.u16le(20);
  } else if ([16, 40, 52, 56, 64, 108, 124].includes(dibSize)) {
    r.need(14, 16, 'BITMAPINFOHEADER');
    width = r.i32le(18);
    const h = r.i32le(22);
    if (h === -0x80000000) throw new HeaderError('height out of range');
    height = Math.abs(h); // negative height = top-down rows
  } else {
    throw new HeaderError(`unknown DIB header size ${dibSize}`);
  }
  if (width <= 0 || height === 0) throw new HeaderError(`invalid dimensions (${width}x${height})`);
  return { width, height, frames: 1 };
}

// ---------------------------------------------------------------------------------------------- TIFF

interface TiffLayout {
  le: boolean;
  big: boolean;
}

function tiffUint(r: Bytes, t: TiffLayout, o: number, size: 2 | 4 | 8): number {
  if (size === 2) return t.le ? r.u16le(o) : r.u16be(o);
  if (size === 4) return t.le ? r.u32le(o) : r.u32be(o);
  const lo = t.le ? r.u32le(o) : r.u32be(o + 4);
  const hi = t.le ? r.u32le(o + 4) : r.u32be(o);
  // Offsets beyond 2^53 cannot be inside any buffer we accept: map them to "out of range".
  return hi >= 0x200000 ? Number.MAX_SAFE_INTEGER : hi * 0x1_0000_0000 + lo;
}

interface Ifd {
  entries: number;
  count: number;
  next: number;
}

/** The IFD at `offset` if it lies wholly inside the data, else undefined. */
function readIfd(r: Bytes, t: TiffLayout, offset: number): Ifd | undefined {
  const countSize = t.big ? 8 : 2;
  const entrySize = t.big ? 20 : 12;
  const nextSize = t.big ? 8 : 4;
  if (offset < 8 || !r.has(offset, countSize)) return undefined;
  const count = tiffUint(r, t, offset, countSize);
  const entries = offset + countSize;
  if (!r.has(entries, count * entrySize + nextSize)) return undefined;
  const next = tiffUint(r, t, entries + count * entrySize, nextSize);
  return { entries, count, next };
}

function tiffTagValue(r: Bytes, t: TiffLayout, ifd: Ifd, tag: number): number | undefined {
  const entrySize = t.big ? 20 : 12;
  for (let i = 0; i < ifd.count; i++) {
    const e = ifd.entries + i * entrySize;
    if (tiffUint(r, t, e, 2) !== tag) continue;
    const type = tiffUint(r, t, e + 2, 2);
    const valueAt = e + (t.big ? 12 : 8);
    if (type === 3) return tiffUint(r, t, valueAt, 2); // SHORT
    if (type === 4) return tiffUint(r, t, valueAt, 4); // LONG
    if (type === 16 && t.big) return tiffUint(r, t, valueAt, 8); // LONG8
    throw new HeaderError(`unexpected type ${type} for tag ${tag}`);
  }
  return undefined;
}

const TIFF_TYPE_SIZES: Record<number, 2 | 4 | 8> = { 3: 2, 4: 4, 16: 8 };

/** Every value of an integer tag (SHORT, LONG, LONG8), inline or out of line; undefined if absent. */
function tiffTagValues(r: Bytes, t: TiffLayout, ifd: Ifd, tag: number): number[] | undefined {
  const entrySize = t.big ? 20 : 12;
  for (let i = 0; i < ifd.count; i++) {
    const e = ifd.entries + i * entrySize;
    if (tiffUint(r, t, e, 2) !== tag) continue;
    const size = TIFF_TYPE_SIZES[tiffUint(r, t, e + 2, 2)];
    if (size === undefined || (size === 8 && !t.big)) throw new HeaderError(`unexpected type for tag ${tag}`);
    const count = tiffUint(r, t, e + 4, t.big ? 8 : 4);
    const inline = t.big ? 8 : 4;
    const valueAt = e + (t.big ? 12 : 8);
    const at = count * size <= inline ? valueAt : tiffUint(r, t, valueAt, t.big ? 8 : 4);
    if (!r.has(at, count * size)) throw new HeaderError(`tag ${tag} points outside the data`);
    const values: number[] = [];
    for (let k = 0; k < count; k++) values.push(tiffUint(r, t, at + k * size, size));
    return values;
  }
  return undefined;
}

/**
 * The first page's strips (or tiles) and tag values must lie inside the data: libtiff reads a cut-off strip with a
 * warning only (and failOn 'warning' would refuse valid GeoTIFFs for their unknown tags), so a
 * truncated TIFF would otherwise decode into a partly blank page. Checked from the IFD, no decoding.
 */
/** Bytes per value of each TIFF field type (TIFF 6.0 and BigTIFF); unknown types are skipped. */
const TIFF_FIELD_SIZES: Record<number, number> = {
  1: 1,
  2: 1,
  3: 2,
  4: 4,
  5: 8,
  6: 1,
  7: 1,
  8: 2,
  9: 4,
  10: 8,
  11: 4,
  12: 8,
  13: 4,
  16: 8,
  17: 8,
  18: 8,
};

function checkTiffData(r: Bytes): void {
  const { t, ifd } = firstTiffIfd(r);
  // Every out-of-line value of the first page (ICC profile, colour maps, strip tables …) inside the data.
  const entrySize = t.big ? 20 : 12;
  const inline = t.big ? 8 : 4;
  for (let i = 0; i < ifd.count; i++) {
    const e = ifd.entries + i * entrySize;
    const size = TIFF_FIELD_SIZES[tiffUint(r, t, e + 2, 2)];
    if (size === undefined) continue;
    const bytes = tiffUint(r, t, e + 4, t.big ? 8 : 4) * size;
    if (bytes <= inline) continue;
    const at = tiffUint(r, t, e + (t.big ? 12 : 8), t.big ? 8 : 4);
    if (at + bytes > r.length)
      throw new HeaderError(`data cut off (tag ${tiffUint(r, t, e, 2)} beyond the end)`);
  }
  for (const [offsetsTag, countsTag] of [
    [273, 279], // StripOffsets, StripByteCounts
    [324, 325], // TileOffsets, TileByteCounts
  ] as const) {
    const offsets = tiffTagValues(r, t, ifd, offsetsTag);
    if (offsets === undefined) continue;
    const counts = tiffTagValues(r, t, ifd, countsTag);
    // Without byte counts libtiff estimates them; then only the offsets themselves can be checked.
    for (let i = 0; i < offsets.length; i++) {
      const offset = offsets[i] as number;
      const count = counts?.[i] ?? 0;
      if (offset + count > r.length)
        throw new HeaderError('image data cut off (strip or tile beyond the end)');
    }
  }
}

function firstTiffIfd(r: Bytes): { t: TiffLayout; first: number; ifd: Ifd } {
  r.need(0, 8, 'TIFF header');
  const order = r.ascii(0, 2);
  if (order !== 'II' && order !== 'MM') throw new HeaderError('bad byte order mark');
  const le = order === 'II';
  const version = le ? r.u16le(2) : r.u16be(2);
  let t: TiffLayout;
  let first: number;
  if (version === 42) {
    t = { le, big: false };
    first = tiffUint(r, t, 4, 4);
  } else if (version === 43) {
    t = { le, big: true };
    r.need(0, 16, 'BigTIFF header');
    if (tiffUint(r, t, 4, 2) !== 8 || tiffUint(r, t, 6, 2) !== 0) throw new HeaderError('bad BigTIFF header');
    first = tiffUint(r, t, 8, 8);
  } else {
    throw new HeaderError(`bad TIFF version ${version}`);
  }
  const ifd = readIfd(r, t, first);
  if (!ifd) throw new HeaderError('first IFD out of range');
  return { t, first, ifd };
}

/**
 * Bytes a pixel of a TIFF's first page holds once decoded: SamplesPerPixel × BitsPerSample (the
 * largest), at least one byte a sample. 3 (8-bit RGB) when the tags are absent or unreadable.
 */
export function tiffPixelBytes(bytes: Uint8Array): number {
  try {
    const r = new Bytes(bytes);
    const { t, ifd } = firstTiffIfd(r);
    const samples = tiffTagValue(r, t, ifd, 277) ?? 1;
    const bits = Math.max(8, ...(tiffTagValues(r, t, ifd, 258) ?? [8]));
    return Math.ceil((Math.min(samples, 65_535) * Math.min(bits, 64)) / 8);
  } catch {
    return 3;
  }
}

function probeTiff(r: Bytes): Dims {
  const { t, first, ifd } = firstTiffIfd(r);
  const width = tiffTagValue(r, t, ifd, 256) ?? 0;
  const height = tiffTagValue(r, t, ifd, 257) ?? 0;
  if (width === 0 || height === 0) throw new HeaderError(`missing or zero dimensions (${width}x${height})`);
  // Pages: follow the IFD chain, stopping at the end, a loop, an out-of-range IFD or the cap.
  let frames = 1;
  const seen = new Set<number>([first]);
  let next = ifd.next;
  while (next !== 0 && !seen.has(next)) {
    seen.add(next);
    const page = readIfd(r, t, next);
    if (!page) break;
    // libtiff walks every directory too (~230 bytes and 17 µs each, measured): bounded here.
    if (frames === MAX_TIFF_PAGES) throw new HeaderError(`more than ${MAX_TIFF_PAGES} pages`);
    frames += 1;
    next = page.next;
  }
  return { width, height, frames };
}

// ------------------------------------------------------------------------------------------- limits

const PARSERS: Record<ImageFormat, (r: Bytes) => Dims> = {
  jpeg: probeJpeg,
  png: probePng,
  gif: probeGif,
  webp: probeWebp,
  bmp: probeBmp,
  tiff: probeTiff,
};

/** Throws 4004 when `probed` exceeds the per-format limits of spec part 8. */
export function enforceLimits(probed: ProbedImage, limits: DimensionLimits = DEFAULT_DIMENSION_LIMITS): void {
  const limit = probed.format === 'jpeg' ? limits.jpeg : limits.other;
  const { width, height } = probed;
  const pixels = width * height;
  if (Math.max(width, height) > limit.maxEdge || pixels > limit.maxPixels) {
    throw new ApiError(
      'DIMENSIONS_EXCEEDED',
      `Image dimensions ${width}x${height} (${pixels} px) exceed the ${FORMAT_NAMES[probed.format]} limits: ` +
        `longest edge <= ${limit.maxEdge} px and total <= ${limit.maxPixels} px`,
    );
  }
}

/**
 * Width, height and frames of `bytes` (already sniffed as `format`) from the header only, then the
 * dimension limits. Throws ApiError 4005 for a truncated or inconsistent header, 4004 over the limits.
 */
export function probeHeader(
  bytes: Uint8Array,
  format: ImageFormat,
  limits: DimensionLimits = DEFAULT_DIMENSION_LIMITS,
): ProbedImage {
  let dims: Dims;
  try {
    dims = PARSERS[format](new Bytes(bytes));
  } catch (err) {
    if (isApiError(err)) throw err;
    const detail = err instanceof HeaderError ? err.message : 'malformed header';
    throw new ApiError('UNDECODABLE', `Undecodable ${FORMAT_NAMES[format]} image: ${detail}`);
  }
  const probed: ProbedImage = { format, ...dims };
  enforceLimits(probed, limits);
  if (format === 'jpeg') {
    try {
      checkJpegCost(bytes);
    } catch (err) {
      const detail = err instanceof HeaderError ? err.message : 'malformed header';
      throw new ApiError('UNDECODABLE', `Undecodable JPEG image: ${detail}`);
    }
  }
  if (format === 'webp' && probed.frames > MAX_WEBP_FRAMES) {
    throw new ApiError(
      'UNDECODABLE',
      `Undecodable WebP image: ${probed.frames} frames, over the limit of ${MAX_WEBP_FRAMES} (the decoder's cost grows with the square of the frame count)`,
    );
  }
  return probed;
}

/**
 * Does the data hold the image its (probed, within-limits) header claims? Header-only lower bounds,
 * run just before decoding (probeHeader itself answers size questions, and a bomb is a 4004 there
 * whatever its data): a Huffman JPEG needs at least one bit per 8×8 block, a TIFF's first-page strips
 * must lie inside the data. Throws ApiError 4005 otherwise; costs a header walk, never a decode.
 */
export function checkImageData(bytes: Uint8Array, probed: ProbedImage): void {
  try {
    const r = new Bytes(bytes);
    if (probed.format === 'jpeg') checkJpegData(r, probed.width, probed.height);
    else if (probed.format === 'tiff') checkTiffData(r);
  } catch (err) {
    if (isApiError(err)) throw err;
    const detail = err instanceof HeaderError ? err.message : 'malformed header';
    throw new ApiError('UNDECODABLE', `Undecodable ${FORMAT_NAMES[probed.format]} image: ${detail}`);
  }
}
