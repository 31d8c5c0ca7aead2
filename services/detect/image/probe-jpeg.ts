// The JPEG header: the first frame's size, the walk of every marker that says what decoding will cost
// (scans, blocks, metadata; entropy-coded data skipped, never decoded), and whether the data can hold
// the image the frame header claims.

import {
  JPEG_COMPONENT_COUNTS,
  MAX_JPEG_SCAN_BLOCKS,
  MAX_JPEG_SCANS,
  MAX_JPEG_SEGMENTS,
} from './image-cost.ts';
import { Bytes, type Dims, HeaderError, type Walk, WalkBoundError, WalkCache } from './probe-bytes.ts';

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
  for (let segments = 0; ; segments++) {
    if (segments > MAX_JPEG_SEGMENTS) throw tooManySegments();
    // Like libjpeg, tolerate garbage before a marker and any number of 0xFF fill bytes.
    p = r.b.indexOf(0xff, p);
    if (p < 0) p = n;
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

function tooManySegments(): WalkBoundError {
  return new WalkBoundError(`over ${MAX_JPEG_SEGMENTS} marker segments (no real file has so many)`);
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
function scanEnd(data: Buffer, start: number, budget: number): number {
  const n = data.length;
  const stop = start + budget;
  let p = start;
  while (p + 1 < n) {
    // Past its budget the search stops and says where to resume (~p), so that the walk can pause.
    if (p >= stop) return ~p;
    p = data.indexOf(0xff, p);
    if (p < 0) return n;
    for (let last = p; p + 1 < n && p - last < 16 && p < stop; p++) {
      if (data[p] !== 0xff) continue;
      last = p;
      const next = data[p + 1] as number;
      if (!RST_OR_STUFFING(next) && next !== 0xff) return p;
    }
  }
  return n;
}

/**
 * The walk of each buffer (or why it failed), kept while the buffer lives: probe, estimate and decode
 * all ask, and a walk is never run twice.
 */
const walked = new WalkCache(walkJpeg);

/**
 * Walks every marker of a JPEG up to EOI or the end of the data. An SOS segment is followed by its
 * entropy-coded data, which ends at the first FF not followed by 00 (stuffing) or a restart marker.
 */
export const jpegStructure = (bytes: Uint8Array): JpegStructure => walked.get(bytes);

/**
 * The same walk, pausing (walkInSlices) so that a long one — 50 MB of stuffed entropy-coded data —
 * does not hold the event loop; its result is kept for jpegStructure. A malformed file is left for
 * the probe to refuse (the walk returns why).
 */
export const jpegStructureWalk = (bytes: Uint8Array): Walk<Error | undefined> => walked.prefill(bytes);

/** Entropy-coded bytes searched between two pauses of the walk. */
const SCAN_SLICE_BYTES = 1 << 20;
/** Marker segments walked between two pauses. */
const SEGMENT_SLICE = 1_024;

function* walkJpeg(bytes: Uint8Array): Walk<JpegStructure> {
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
  let segments = 0;
  while (p < n) {
    if (++segments > MAX_JPEG_SEGMENTS) throw tooManySegments();
    if (segments % SEGMENT_SLICE === 0) yield;
    p = data.indexOf(0xff, p);
    if (p < 0) break;
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
      p = scanEnd(data, p + length, SCAN_SLICE_BYTES);
      while (p < 0) {
        yield;
        p = scanEnd(data, ~p, SCAN_SLICE_BYTES);
      }
      if (p + 1 >= n) break;
      continue;
    }
    p += length;
  }
  const coefficientsComplete = coefficientBits.every((bits) => bits.every((b) => b === 0));
  return { marker, components, componentBlocks, scans, scanBlocks, metadataBytes, coefficientsComplete };
}

/** A JPEG whose scans would cost more than any real one: 4005, before any decoding. */
export function checkJpegCost(bytes: Uint8Array): void {
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

export function probeJpeg(r: Bytes): Dims {
  const { p } = findJpegFrame(r);
  r.need(p, 8, 'frame size');
  const height = r.u16be(p + 3);
  const width = r.u16be(p + 5);
  // Height 0 would mean "defined later by a DNL marker", which libjpeg does not support either.
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames: 1 };
}

export function checkJpegData(r: Bytes, width: number, height: number): void {
  const { marker, p } = findJpegFrame(r);
  if (JPEG_ARITHMETIC_SOF.has(marker)) return;
  const blocks = jpegLargestComponentBlocks(r, p, width, height);
  if (r.length * 8 < blocks) {
    throw new HeaderError(`${r.length} bytes cannot hold a ${width}x${height} image (truncated or forged)`);
  }
}
