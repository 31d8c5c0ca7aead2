// The PNG header: size and bit depth from IHDR, APNG's frame count from acTL, and the bytes of the
// chunks a decoder copies besides the image data.

import { Bytes, type Dims, HeaderError } from './probe-bytes.ts';

const PNG_BIT_DEPTHS: Record<number, number[]> = {
  0: [1, 2, 4, 8, 16], // grey
  2: [8, 16], // RGB
  3: [1, 2, 4, 8], // palette
  4: [8, 16], // grey + alpha
  6: [8, 16], // RGBA
};

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
