// The PNG header: size and bit depth from IHDR, APNG's frame count from acTL, and the bytes of the
// chunks a decoder copies besides the image data.

import { MAX_PNG_CHUNKS } from './image-cost.ts';
import { Bytes, type Dims, HeaderError, type Walk, WalkBoundError, WalkCache } from './probe-bytes.ts';

const PNG_BIT_DEPTHS: Record<number, number[]> = {
  0: [1, 2, 4, 8, 16], // grey
  2: [8, 16], // RGB
  3: [1, 2, 4, 8], // palette
  4: [8, 16], // grey + alpha
  6: [8, 16], // RGBA
};

/** Chunk types as big-endian 32-bit numbers: compared without making strings. */
const chunkType = (name: string): number =>
  ((name.charCodeAt(0) << 24) |
    (name.charCodeAt(1) << 16) |
    (name.charCodeAt(2) << 8) |
    name.charCodeAt(3)) >>>
  0;
const IDAT = chunkType('IDAT');
const IEND = chunkType('IEND');
const ACTL = chunkType('acTL');

/** Chunks walked between two pauses of the walk. */
const CHUNK_SLICE = 1_024;

export function probePng(r: Bytes): Dims {
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
  return { width, height, frames: pngChunks.get(r.b).frames };
}

/** What the walk of a PNG's chunks finds. */
interface PngChunks {
  /** APNG: the frame count of an acTL chunk before the first IDAT; 1 otherwise. */
  frames: number;
  /** Bytes of the chunks the decoder keeps (pngAncillaryBytes). */
  keptBytes: number;
}

/**
 * One walk of every chunk header, anywhere in the file (text may follow the image data), at most
 * MAX_PNG_CHUNKS of them (past it: HeaderError, 4005), pausing every CHUNK_SLICE chunks.
 */
function* walkPng(bytes: Uint8Array): Walk<PngChunks> {
  const r = new Bytes(bytes);
  let frames = 1;
  let seenImage = false;
  let keptBytes = 0;
  let p = 8;
  for (let chunks = 0; r.has(p, 8); chunks++) {
    if (chunks > MAX_PNG_CHUNKS)
      throw new WalkBoundError(`over ${MAX_PNG_CHUNKS} chunks (no real file has so many)`);
    if (chunks % CHUNK_SLICE === CHUNK_SLICE - 1) yield;
    const length = r.u32be(p);
    const type = r.u32be(p + 4);
    if (type === IEND) break;
    if (type === IDAT) seenImage = true;
    else if (type === ACTL && !seenImage && length >= 8 && r.has(p + 8, 8)) {
      const numFrames = r.u32be(p + 8);
      if (numFrames >= 1) frames = numFrames;
    }
    if (PNG_KEPT_CHUNKS.has(type)) keptBytes += Math.min(length, r.length - p - 8) + PNG_KEPT_CHUNK_OVERHEAD;
    p += 12 + length;
  }
  return { frames, keptBytes };
}

const pngChunks = new WalkCache(walkPng);

/** The walk of a PNG in slices (probe.ts walkHeader), so that it does not hold the event loop. */
export const pngChunksWalk = (bytes: Uint8Array): Walk<Error | undefined> => pngChunks.prefill(bytes);

/**
 * The chunks libspng keeps a copy of (text, profile, EXIF and the small known ones); it skips unknown
 * chunks (SPNG_KEEP_UNKNOWN_CHUNKS is off in libvips), and the image data is inflated, not kept.
 */
const PNG_KEPT_CHUNKS: ReadonlySet<number> = new Set(
  [
    'PLTE',
    'tRNS',
    'cHRM',
    'gAMA',
    'iCCP',
    'sBIT',
    'sRGB',
    'bKGD',
    'hIST',
    'tEXt',
    'zTXt',
    'iTXt',
    'pHYs',
    'sPLT',
    'tIME',
    'oFFs',
    'sCAL',
    'eXIf',
  ].map(chunkType),
);

/** What libspng and libvips keep per kept chunk besides its bytes (a record, a string header). */
const PNG_KEPT_CHUNK_OVERHEAD = 64;

/**
 * Bytes of every chunk of a PNG the decoder keeps (PNG_KEPT_CHUNKS), each with a record's overhead:
 * the decoder reads them into buffers of its own, then libvips copies the text and EXIF into the
 * image's metadata (measured: ~6 bytes of memory per byte of tEXt).
 */
export function pngAncillaryBytes(bytes: Uint8Array): number {
  return pngChunks.get(bytes).keptBytes;
}
