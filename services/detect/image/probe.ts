// Header-only probing: width, height and frame count read by small parsers of our own (one file per
// format: probe-<format>.ts), BEFORE any pixel is decoded, then the dimension limits of spec part 8
// (DESIGN.md, "dimension checks").
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
import { FORMATS } from '../../../lib/common/image-formats.ts';
import { isLongBox, tileBoxes } from './frame-layout.ts';
import { pixelsToDecode, sampledFrames } from './frames.ts';
import { type CostFacts, MAX_WEBP_FRAMES } from './image-cost.ts';
import { probeBmp } from './probe-bmp.ts';
import { Bytes, type Dims, HeaderError, type Walk, walkInSlices } from './probe-bytes.ts';
import { gifWalk, probeGif } from './probe-gif.ts';
import { checkJpegCost, checkJpegData, jpegStructure, jpegStructureWalk, probeJpeg } from './probe-jpeg.ts';
import { pngChunksWalk, probePng } from './probe-png.ts';
import { checkTiffData, probeTiff } from './probe-tiff.ts';
import { probeWebp } from './probe-webp.ts';
import {
  DEFAULT_DIMENSION_LIMITS,
  type DimensionLimits,
  type ImageFormat,
  limitsOf,
  type ProbedImage,
} from './types.ts';

/** One header parser per format, one file each (probe-<format>.ts). */
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
  const limit = limitsOf(limits, probed.format);
  const { width, height } = probed;
  const pixels = width * height;
  if (Math.max(width, height) > limit.maxEdge || pixels > limit.maxPixels) {
    throw new ApiError(
      'DIMENSIONS_EXCEEDED',
      `Image dimensions ${width}x${height} (${pixels} px) exceed the ${FORMATS[probed.format].name} limits: ` +
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
    throw new ApiError('UNDECODABLE', `Undecodable ${FORMATS[format].name} image: ${detail}`);
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
    throw new ApiError('UNDECODABLE', `Undecodable ${FORMATS[probed.format].name} image: ${detail}`);
  }
}

/**
 * Walks what the probe will ask of a long file (a JPEG's markers and entropy-coded data, a PNG's
 * chunks, a GIF's blocks) in slices, so that it never holds the event loop for long; the probe then
 * reads the walk's result. The other walks (WebP chunks, TIFF directories) are bounded to well under
 * a slice.
 */
export async function walkHeader(bytes: Uint8Array, format: ImageFormat): Promise<void> {
  const walk = headerWalk(bytes, format);
  if (walk) await walkInSlices(walk);
}

/**
 * The long walk of `bytes` as `format` (JPEG, PNG, GIF; undefined for the others), keeping its result
 * for the probe; the walk returns why it failed, if it did.
 */
export function headerWalk(bytes: Uint8Array, format: ImageFormat): Walk<Error | undefined> | undefined {
  if (format === 'jpeg') return jpegStructureWalk(bytes);
  if (format === 'png') return pngChunksWalk(bytes);
  if (format === 'gif') return gifWalk(bytes);
  return undefined;
}

/**
 * What the header says the image will cost (image-cost.ts, predictedCpuMs): its size, frames, file
 * length, a JPEG's scan work, and the tiles of its frame as sent (trimming margins can only make a
 * frame long after decoding, so a frame that is not long counts one).
 */
export function costFacts(
  bytes: Uint8Array,
  probed: ProbedImage,
  maxTiles: number,
  maxFramesScored = 1,
): CostFacts {
  const frame = { left: 0, top: 0, width: probed.width, height: probed.height };
  const framesScored = sampledFrames(probed.frames, maxFramesScored).length;
  return {
    format: probed.format,
    width: probed.width,
    height: probed.height,
    frames: probed.frames,
    bytes: bytes.byteLength,
    ...(probed.format === 'jpeg' && { scanBlocks: jpegStructure(bytes).scanBlocks }),
    tiles: isLongBox(frame) ? tileBoxes(frame, maxTiles).length : 1,
    ...(framesScored > 1 && { framesScored, decodedPixels: pixelsToDecode(bytes, probed, maxFramesScored) }),
  };
}
