// How much memory decoding an image will take, from its header alone, so that the work gate admits
// images against a memory budget before any pixel is decoded (work-gate.ts). An upper estimate of
// what the decoder holds at its peak; the upload itself is counted apart (MAX_UPLOAD_BYTES_IN_PROGRESS).
//
// - JPEG: libjpeg keeps the whole image's DCT coefficients (2 bytes a sample, per component at its
//   own sampling) whenever the file has more than one scan — every progressive JPEG, and baseline
//   ones with separate scans — whatever the output size. Pixels: a JPEG up to FULL_DECODE_MAX_PIXELS
//   the fast path declines is decoded whole by sharp (3 bytes a pixel, 4 for CMYK); a larger one is
//   shrunk on load to 1/8 of each edge.
// - PNG: libspng's output at the file's depth and channels (16-bit RGBA: 8 bytes a pixel), then the
//   8-bit sRGB image libvips makes of it.
// - GIF, WebP: the first frame as RGBA, plus the decoder's own buffer of the same size.
// - TIFF: up to 16-bit RGBA strips or tiles decoded whole, then 8-bit RGBA.
// - BMP: decoded in JavaScript into RGB.
// Every image also costs the model input and decoder bookkeeping (PER_IMAGE_BYTES).

import { FULL_DECODE_MAX_PIXELS } from '../scoring/image-scorer.ts';
import { jpegFrameLayout } from './probe.ts';
import type { ProbedImage } from './types.ts';

const PER_IMAGE_BYTES = 8 * 1024 * 1024;

/** Progressive SOFs (DCT, Huffman and arithmetic): always several scans. */
const PROGRESSIVE_SOF = new Set([0xc2, 0xc6, 0xca, 0xce]);

/** SOS markers in the data: entropy-coded bytes never hold FF DA (an FF there is stuffed or a RST). */
function scanCount(bytes: Uint8Array, atMost: number): number {
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let count = 0;
  for (let at = data.indexOf(0xff); at >= 0 && count < atMost; at = data.indexOf(0xff, at + 1)) {
    if (data[at + 1] === 0xda) count += 1;
  }
  return count;
}

function jpegBytes(bytes: Uint8Array, { width, height }: ProbedImage): number {
  const { marker, sampling } = jpegFrameLayout(bytes);
  const hMax = Math.max(...sampling.map(([h]) => h));
  const vMax = Math.max(...sampling.map(([, v]) => v));
  let coefficients = 0;
  if (PROGRESSIVE_SOF.has(marker) || scanCount(bytes, 2) > 1) {
    for (const [h, v] of sampling) {
      // Whole MCUs: each component's blocks cover the image rounded up to the MCU.
      const mcuColumns = Math.ceil(width / (8 * hMax));
      const mcuRows = Math.ceil(height / (8 * vMax));
      coefficients += mcuColumns * h * mcuRows * v * 64 * 2;
    }
  }
  const pixels = width * height;
  const channels = sampling.length === 4 ? 4 : 3;
  const output = pixels > FULL_DECODE_MAX_PIXELS ? Math.ceil(pixels / 64) * channels : pixels * channels;
  return coefficients + output;
}

/** PNG IHDR: bytes per pixel of the decoded file (bit depth × channels, at least one byte). */
function pngBytesPerPixel(bytes: Uint8Array): number {
  const depth = bytes[24] ?? 16;
  const colourType = bytes[25] ?? 6;
  const channels = { 0: 1, 2: 3, 3: 4, 4: 2, 6: 4 }[colourType] ?? 4;
  return Math.max(1, Math.ceil((channels * Math.max(8, depth)) / 8));
}

export function decodeMemoryBytes(bytes: Uint8Array, probed: ProbedImage): number {
  const pixels = probed.width * probed.height;
  let decoder: number;
  switch (probed.format) {
    case 'jpeg':
      decoder = jpegBytes(bytes, probed);
      break;
    case 'png':
      decoder = pixels * (pngBytesPerPixel(bytes) + 4);
      break;
    case 'gif':
    case 'webp':
      decoder = pixels * 8;
      break;
    case 'tiff':
      decoder = pixels * 12;
      break;
    case 'bmp':
      decoder = pixels * 4;
      break;
  }
  return decoder + PER_IMAGE_BYTES;
}
