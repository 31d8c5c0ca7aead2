// How much memory decoding an image will take, from its header alone, so that the work gate admits
// images against a memory budget before any pixel is decoded (work-gate.ts). An upper estimate of
// what the decoder holds at its peak; the upload itself is counted apart (MAX_UPLOAD_BYTES_IN_PROGRESS).
//
// - JPEG: libjpeg keeps the whole image's DCT coefficients (2 bytes a sample, per component at its
//   own sampling) whenever the file has more than one scan — every progressive JPEG, and baseline
//   ones with separate scans — whatever the output size. Pixels: a JPEG up to SHRINK_ON_LOAD_ABOVE_PIXELS
//   the fast path declines is decoded whole by sharp (3 bytes a pixel, 4 for CMYK); a larger one is
//   shrunk on load to 1/8 of each edge (that image twice: libjpeg's and libvips's). APPn and COM
//   segments: JPEG_METADATA_FACTOR bytes per byte (libjpeg's saved markers, libvips's blobs).
// - PNG: libspng's output at the file's depth and channels (16-bit RGBA: 8 bytes a pixel), then the
//   8-bit sRGB image libvips makes of it; ancillary chunks (text, EXIF, ICC): PNG_ANCILLARY_FACTOR
//   bytes per byte. Compressed text and profiles inflate within libspng's chunk limits (measured: a
//   1 MB zTXt, iTXt or iCCP inflating to 256 MB costs under 4 MB), so their file bytes are the measure.
// - GIF: the first frame as RGBA, plus the decoder's own buffer of the same size, plus a record of
//   every frame in the file (GIF_FRAME_BYTES: libnsgif scans them all).
// - WebP: the RGBA frame, libwebp's own planes, the sRGB copy (12 bytes a pixel, measured ≤ 10).
// - TIFF: strips or tiles decoded at the file's sample size (tiffPixelBytes), then 8-bit RGBA; at
//   least 12 bytes a pixel; and a directory record per page (TIFF_PAGE_BYTES: libtiff reads them all).
// - BMP: decoded in JavaScript into RGB(A), handed to sharp, flattened (12 bytes a pixel, measured ≤ 6.1).
// Every image also costs the model input and decoder bookkeeping (PER_IMAGE_BYTES).
// decode-memory-peak.test.ts decodes each kind and checks the measured peak stays under the estimate.

import {
  GIF_FRAME_BYTES,
  JPEG_METADATA_FACTOR,
  PER_IMAGE_BYTES,
  PNG_ANCILLARY_FACTOR,
  SHRINK_ON_LOAD_ABOVE_PIXELS,
  TIFF_PAGE_BYTES,
} from './image-cost.ts';
import { jpegStructure, PROGRESSIVE_SOF } from './probe-jpeg.ts';
import { pngAncillaryBytes } from './probe-png.ts';
import { tiffPixelBytes } from './probe-tiff.ts';
import type { ProbedImage } from './types.ts';

function jpegBytes(bytes: Uint8Array, { width, height }: ProbedImage): number {
  const s = jpegStructure(bytes);
  let coefficients = 0;
  if (PROGRESSIVE_SOF.has(s.marker) || s.scans > 1) {
    // Whole MCUs of every component, 64 coefficients of 2 bytes a block.
    for (const blocks of s.componentBlocks) coefficients += blocks * 64 * 2;
  }
  const pixels = width * height;
  const channels = s.components.length === 4 ? 4 : 3;
  // Shrunk on load: libjpeg's 1/8-scale output and the image libvips makes of it.
  const output =
    pixels > SHRINK_ON_LOAD_ABOVE_PIXELS ? Math.ceil(pixels / 64) * channels * 2 : pixels * channels;
  return coefficients + output + s.metadataBytes * JPEG_METADATA_FACTOR;
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
      decoder = pixels * (pngBytesPerPixel(bytes) + 4) + pngAncillaryBytes(bytes) * PNG_ANCILLARY_FACTOR;
      break;
    case 'gif':
      decoder = pixels * 8 + probed.frames * GIF_FRAME_BYTES;
      break;
    case 'webp':
      decoder = pixels * 12;
      break;
    case 'tiff':
      decoder = pixels * Math.max(12, tiffPixelBytes(bytes) + 4) + probed.frames * TIFF_PAGE_BYTES;
      break;
    case 'bmp':
      decoder = pixels * 12;
      break;
  }
  return decoder + PER_IMAGE_BYTES;
}
