// Which frames of an animation (GIF, animated WebP, APNG) or pages of a multi-page TIFF are scored, and
// what decoding them costs, from the header alone. The spec scores the first frame only, and so does
// the default (MAX_FRAMES_SCORED = 1); an operator may ask for up to N frames, taken evenly over the
// animation from the first to the last, each scored like a still frame, the highest answering.
//
// Cost: the decoders render a frame of an animation by replaying every frame before it (a GIF or WebP
// frame is drawn over the ones before it), so scoring frame i of a GIF or WebP decodes i + 1 frames of
// the canvas; APNG frames are replayed once for all (apng.ts); a TIFF page is decoded on its own. Past
// MAX_DECODED_FRAME_PIXELS the image is refused (4004) before any pixel is decoded: the decode work of
// the largest allowed still image, a 200 MP JPEG.

import { ApiError } from '../../../lib/common/errors.ts';
import { FORMATS } from '../../../lib/common/image-formats.ts';
import { tiffPageSizes } from './probe-tiff.ts';
import { type DimensionLimits, limitsOf, type ProbedImage } from './types.ts';

/** Pixels the frames scored of one image may take to decode, at most (see the header). */
export const MAX_DECODED_FRAME_PIXELS = 200_000_000;

/**
 * Frames an animated WebP may have for more than one of them to be scored: libvips's loader costs the
 * square of the frame count at every opening (image-cost.ts, MAX_WEBP_FRAMES: 5,000 frames 0.13 s), and
 * each frame scored is one opening; 2,048 frames cost ~0.02 s an opening.
 */
export const MAX_WEBP_FRAMES_SAMPLED = 2_048;

/** The frames scored of an input of `frames` frames: evenly from the first to the last, at most `max`. */
export function sampledFrames(frames: number, max: number): number[] {
  const n = Math.max(1, Math.min(frames, Math.floor(max)));
  if (n === 1) return [0];
  return Array.from({ length: n }, (_, k) => Math.round((k * (frames - 1)) / (n - 1)));
}

/** Pixels decoded to score `indices` of `probed` (see the header). */
export function decodedFramePixels(
  bytes: Uint8Array,
  probed: ProbedImage,
  indices: readonly number[],
): number {
  const canvas = probed.width * probed.height;
  if (indices.length <= 1 && (indices[0] ?? 0) === 0) return canvas;
  switch (FORMATS[probed.format].frames) {
    case 'pages':
      return tiffPageSizes(bytes, Math.max(...indices) + 1)
        .filter((_, i) => indices.includes(i))
        .reduce((n, page) => n + page.width * page.height, 0);
    case 'apng':
      return (Math.max(...indices) + 1) * canvas;
    case 'replayed':
    case 'none':
      return indices.reduce((n, i) => n + (i + 1) * canvas, 0);
  }
}

/**
 * The frames of `probed` to score with MAX_FRAMES_SCORED = `maxFramesScored`, after checking from the
 * header that decoding them is within the bounds: every TIFF page scored within the dimension limits,
 * and all of them within MAX_DECODED_FRAME_PIXELS. Throws ApiError 4004 otherwise.
 */
export function framesToScore(
  bytes: Uint8Array,
  probed: ProbedImage,
  maxFramesScored: number,
  limits: DimensionLimits,
): number[] {
  const indices = sampledFrames(probed.frames, maxFramesScored);
  if (indices.length === 1) return indices;
  const name = FORMATS[probed.format].name;
  if (FORMATS[probed.format].frames === 'pages') {
    const { maxEdge, maxPixels } = limitsOf(limits, probed.format);
    const pages = tiffPageSizes(bytes, Math.max(...indices) + 1);
    for (const i of indices) {
      const { width, height } = pages[i] ?? { width: 0, height: 0 };
      if (width === 0 || height === 0 || Math.max(width, height) > maxEdge || width * height > maxPixels) {
        throw new ApiError(
          'DIMENSIONS_EXCEEDED',
          `Image dimensions exceed the limits: TIFF page ${i} is ${width}x${height} (limits: longest edge ${maxEdge} px, ${maxPixels} pixels)`,
        );
      }
    }
  }
  if (probed.format === 'webp' && probed.frames > MAX_WEBP_FRAMES_SAMPLED) {
    throw new ApiError(
      'DIMENSIONS_EXCEEDED',
      `Image dimensions exceed the limits: scoring ${indices.length} of the ${probed.frames} frames of this WebP image is over the limit of ${MAX_WEBP_FRAMES_SAMPLED} frames (the decoder's cost grows with the square of the frame count at each frame)`,
    );
  }
  const pixels = decodedFramePixels(bytes, probed, indices);
  if (pixels > MAX_DECODED_FRAME_PIXELS) {
    throw new ApiError(
      'DIMENSIONS_EXCEEDED',
      `Image dimensions exceed the limits: scoring ${indices.length} of the ${probed.frames} frames of this ${name} image decodes ${pixels} pixels, over the limit of ${MAX_DECODED_FRAME_PIXELS}`,
    );
  }
  return indices;
}

/**
 * Pixels decoded to score `bytes` with MAX_FRAMES_SCORED = `maxFramesScored` (the first frame's when
 * one is scored, or when the header cannot say: framesToScore refuses such an image before decoding).
 */
export function pixelsToDecode(bytes: Uint8Array, probed: ProbedImage, maxFramesScored: number): number {
  try {
    return decodedFramePixels(bytes, probed, sampledFrames(probed.frames, maxFramesScored));
  } catch {
    return probed.width * probed.height;
  }
}
