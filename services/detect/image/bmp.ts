// Our own guarded BMP decoder: the prebuilt libvips in sharp cannot read BMP.
//
// Supported: BITMAPCOREHEADER (12), OS/2 2.x (16 and 64), BITMAPINFOHEADER (40), V2 (52), V3 (56),
// V4 (108) and V5 (124) headers; 1/2/4/8-bit palettes, 16-bit (5-5-5 or BI_BITFIELDS), 24-bit,
// 32-bit (BGRX / BGRA / BI_BITFIELDS / BI_ALPHABITFIELDS); RLE8 and RLE4; bottom-up and top-down rows.
// Not supported (→ 4005): embedded JPEG/PNG (BI_JPEG, BI_PNG), OS/2 Huffman 1D and RLE24, 64-bit.
//
// Conventions, chosen to match what browsers (Chromium's BMPImageReader) display:
// - The 4th byte of 32-bit BI_RGB pixels, and an alpha mask, count as alpha only if at least one pixel
//   has a non-zero value there; an all-zero alpha channel means "opaque" (many writers leave it 0).
// - Palette indexes beyond the palette are black.
// - Pixels an RLE stream never writes (delta / early end-of-line / end-of-bitmap) are transparent.
// - Channel values of a bit field of n bits are scaled to 8 bits as round(v * 255 / (2^n - 1)).
//
// Guards: every read is bounds-checked; pixel data shorter than the header promises → 4005; the
// output size is checked against `maxPixels` before anything is allocated; every loop is bounded by
// the output size or advances through the input. Nothing but ApiError is thrown.

import { ApiError } from '../../../lib/common/errors.ts';
import {
  bmpSize,
  CORE_HEADER_SIZE,
  DIB_HEADER_OFFSET,
  HEIGHT_OUT_OF_RANGE,
  INFO_HEADER_SIZES,
  isBmpSignature,
  OS2_HEADER_SIZES,
} from './bmp-header.ts';
import { DEFAULT_DIMENSION_LIMITS } from './types.ts';

export interface DecodedBitmap {
  /** Rows top to bottom, pixels interleaved RGB (channels 3) or RGBA (channels 4), 8 bits each. */
  data: Buffer;
  width: number;
  height: number;
  channels: 3 | 4;
}

const BI_RGB = 0;
const BI_RLE8 = 1;
const BI_RLE4 = 2;
const BI_BITFIELDS = 3;
const BI_JPEG = 4;
const BI_PNG = 5;
const BI_ALPHABITFIELDS = 6;

class BmpError extends Error {}

function fail(detail: string): never {
  throw new BmpError(detail);
}

interface Field {
  shift: number;
  /** Maximum value of the field (2^bits - 1); 0 when the mask is empty. */
  max: number;
  /** Precomputed 8-bit scale for fields of up to 16 bits. */
  lut: Uint8Array | undefined;
}

function field(mask: number): Field {
  const m = mask >>> 0;
  if (m === 0) return { shift: 0, max: 0, lut: undefined };
  let shift = 0;
  while (((m >>> shift) & 1) === 0) shift++;
  const max = m >>> shift;
  if ((max & (max + 1)) !== 0) fail(`non-contiguous bit mask 0x${m.toString(16)}`);
  let lut: Uint8Array | undefined;
  if (max <= 0xffff) {
    lut = new Uint8Array(max + 1);
    for (let v = 0; v <= max; v++) lut[v] = Math.round((v * 255) / max);
  }
  return { shift, max, lut };
}

function scale(f: Field, px: number): number {
  const v = ((px >>> f.shift) & f.max) >>> 0;
  return f.lut ? (f.lut[v] ?? 0) : Math.round((v * 255) / f.max);
}

/**
 * Decodes a BMP file. Throws ApiError 4005 for anything malformed or unsupported, and refuses
 * (4004) an image over `maxPixels` before allocating it.
 */
export function decodeBmp(
  bytes: Uint8Array,
  maxPixels = DEFAULT_DIMENSION_LIMITS.other.maxPixels,
): DecodedBitmap {
  try {
    return decode(bytes, maxPixels);
  } catch (err) {
    if (err instanceof ApiError) throw err;
    const detail = err instanceof BmpError ? err.message : 'malformed file';
    throw new ApiError('UNDECODABLE', `Undecodable BMP image: ${detail}`);
  }
}

function decode(b: Uint8Array, maxPixels: number): DecodedBitmap {
  const len = b.length;
  const u8 = (o: number): number => {
    const v = b[o];
    if (v === undefined || o < 0) fail('truncated header');
    return v;
  };
  const u16 = (o: number): number => u8(o) | (u8(o + 1) << 8);
  const u32 = (o: number): number => (u8(o) | (u8(o + 1) << 8) | (u8(o + 2) << 16) | (u8(o + 3) << 24)) >>> 0;
  const i32 = (o: number): number => u32(o) | 0;

  if (!isBmpSignature(u8(0), u8(1))) fail('missing BM signature');
  const dataOffset = u32(10);
  const dibSize = u32(DIB_HEADER_OFFSET);
  const isCore = dibSize === CORE_HEADER_SIZE;
  const isOs2 = OS2_HEADER_SIZES.includes(dibSize);
  if (!isCore && !isOs2 && !INFO_HEADER_SIZES.includes(dibSize)) fail(`unknown DIB header size ${dibSize}`);
  if (len < DIB_HEADER_OFFSET + dibSize) fail('truncated DIB header');

  const { width, rawHeight } = bmpSize({ u16le: u16, i32le: i32 }, dibSize);
  let bpp: number;
  let compression = BI_RGB;
  let colorsUsed = 0;
  if (isCore) {
    bpp = u16(24);
  } else {
    bpp = u16(28);
    if (dibSize >= 20) compression = u32(30);
    if (dibSize >= 36) colorsUsed = u32(46);
  }
  if (rawHeight === HEIGHT_OUT_OF_RANGE) fail('height out of range');
  const topDown = rawHeight < 0;
  const height = Math.abs(rawHeight);
  if (width <= 0 || height === 0) fail(`invalid dimensions (${width}x${rawHeight})`);
  if (width * height > maxPixels) {
    throw new ApiError(
      'DIMENSIONS_EXCEEDED',
      `Image dimensions ${width}x${height} (${width * height} px) exceed the BMP limit of ${maxPixels} px`,
    );
  }

  if (isOs2 && compression > BI_RLE4) fail(`unsupported OS/2 compression ${compression}`);
  if (compression === BI_JPEG || compression === BI_PNG) fail('embedded JPEG/PNG data is not supported');
  if (compression > BI_ALPHABITFIELDS) fail(`unknown compression ${compression}`);
  if (compression === BI_RLE8 && bpp !== 8) fail('RLE8 requires 8 bits per pixel');
  if (compression === BI_RLE4 && bpp !== 4) fail('RLE4 requires 4 bits per pixel');
  if ((compression === BI_BITFIELDS || compression === BI_ALPHABITFIELDS) && bpp !== 16 && bpp !== 32) {
    fail(`bit fields require 16 or 32 bits per pixel, not ${bpp}`);
  }
  if (![1, 2, 4, 8, 16, 24, 32].includes(bpp)) fail(`unsupported bit depth ${bpp}`);
  if (topDown && (compression === BI_RLE8 || compression === BI_RLE4)) fail('top-down RLE bitmap');

  // Bit masks: inside V2+ headers, or right after a 40-byte INFO header.
  let afterHeader = 14 + dibSize;
  let masks: [number, number, number, number] | undefined;
  if (compression === BI_BITFIELDS || compression === BI_ALPHABITFIELDS) {
    if (dibSize >= 52) {
      masks = [u32(54), u32(58), u32(62), dibSize >= 56 ? u32(66) : 0];
    } else {
      masks = [u32(54), u32(58), u32(62), compression === BI_ALPHABITFIELDS ? u32(66) : 0];
      afterHeader += compression === BI_ALPHABITFIELDS ? 16 : 12;
    }
  } else if (bpp === 16) {
    masks = [0x7c00, 0x03e0, 0x001f, 0];
  } else if (bpp === 32) {
    masks = [0x00ff0000, 0x0000ff00, 0x000000ff, 0xff000000];
  }

  if (dataOffset < afterHeader || dataOffset >= len) fail('pixel data offset out of range');

  // Palette (1/2/4/8 bits): BGR triples after a core header, BGRx quads otherwise.
  let palette: Uint8Array | undefined; // RGB triples
  if (bpp <= 8) {
    const entrySize = isCore ? 3 : 4;
    let count = colorsUsed === 0 || colorsUsed > 1 << bpp ? 1 << bpp : colorsUsed;
    // The palette ends where the pixel data starts (many files have fewer entries than 2^bpp).
    count = Math.min(count, Math.floor((Math.min(dataOffset, len) - afterHeader) / entrySize));
    if (count <= 0) fail('missing colour palette');
    palette = new Uint8Array(256 * 3); // indexes beyond the palette stay black
    for (let i = 0; i < count; i++) {
      const e = afterHeader + i * entrySize;
      palette[i * 3] = u8(e + 2);
      palette[i * 3 + 1] = u8(e + 1);
      palette[i * 3 + 2] = u8(e);
    }
  }

  if (compression === BI_RLE8 || compression === BI_RLE4) {
    return decodeRle(
      b,
      dataOffset,
      width,
      height,
      compression === BI_RLE8,
      palette ?? fail('missing palette'),
    );
  }

  const stride = Math.floor((bpp * width + 31) / 32) * 4;
  // The last row may lack its padding.
  const needed = stride * (height - 1) + Math.ceil((bpp * width) / 8);
  if (dataOffset + needed > len) fail(`pixel data truncated (${len - dataOffset} of ${needed} bytes)`);

  if (palette) return decodeIndexed(b, dataOffset, stride, width, height, topDown, bpp, palette);
  if (bpp === 24) return decodeBgr24(b, dataOffset, stride, width, height, topDown);
  return decodeMasked(b, dataOffset, stride, width, height, topDown, bpp, masks ?? fail('missing bit masks'));
}

function decodeIndexed(
  b: Uint8Array,
  offset: number,
  stride: number,
  width: number,
  height: number,
  topDown: boolean,
  bpp: number,
  palette: Uint8Array,
): DecodedBitmap {
  const out = new Uint8Array(width * height * 3);
  const { red, green, blue } = splitPalette(palette);
  const valueMask = (1 << bpp) - 1;
  let o = 0;
  for (let row = 0; row < height; row++) {
    const src = offset + (topDown ? row : height - 1 - row) * stride;
    if (bpp === 8) {
      for (let x = 0; x < width; x++) {
        const index = b[src + x] as number;
        out[o++] = red[index] as number;
        out[o++] = green[index] as number;
        out[o++] = blue[index] as number;
      }
    } else {
      for (let x = 0, bit = 0; x < width; x++, bit += bpp) {
        const index = ((b[src + (bit >>> 3)] as number) >>> (8 - bpp - (bit & 7))) & valueMask;
        out[o++] = red[index] as number;
        out[o++] = green[index] as number;
        out[o++] = blue[index] as number;
      }
    }
  }
  return { data: Buffer.from(out.buffer, out.byteOffset, out.byteLength), width, height, channels: 3 };
}

function splitPalette(palette: Uint8Array): { red: Uint8Array; green: Uint8Array; blue: Uint8Array } {
  const red = new Uint8Array(256);
  const green = new Uint8Array(256);
  const blue = new Uint8Array(256);
  for (let i = 0; i < 256; i++) {
    red[i] = palette[i * 3] ?? 0;
    green[i] = palette[i * 3 + 1] ?? 0;
    blue[i] = palette[i * 3 + 2] ?? 0;
  }
  return { red, green, blue };
}

function decodeBgr24(
  b: Uint8Array,
  offset: number,
  stride: number,
  width: number,
  height: number,
  topDown: boolean,
): DecodedBitmap {
  const out = new Uint8Array(width * height * 3);
  let o = 0;
  for (let row = 0; row < height; row++) {
    let s = offset + (topDown ? row : height - 1 - row) * stride;
    for (let x = 0; x < width; x++, s += 3) {
      out[o++] = b[s + 2] ?? 0;
      out[o++] = b[s + 1] ?? 0;
      out[o++] = b[s] ?? 0;
    }
  }
  return { data: Buffer.from(out.buffer, out.byteOffset, out.byteLength), width, height, channels: 3 };
}

function decodeMasked(
  b: Uint8Array,
  offset: number,
  stride: number,
  width: number,
  height: number,
  topDown: boolean,
  bpp: number,
  masks: [number, number, number, number],
): DecodedBitmap {
  const [r, g, bl, a] = masks.map(field) as [Field, Field, Field, Field];
  const bytesPerPixel = bpp >>> 3;
  const pixel = (s: number): number =>
    bytesPerPixel === 2
      ? (b[s] ?? 0) | ((b[s + 1] ?? 0) << 8)
      : ((b[s] ?? 0) | ((b[s + 1] ?? 0) << 8) | ((b[s + 2] ?? 0) << 16) | ((b[s + 3] ?? 0) << 24)) >>> 0;

  // Alpha counts only if some pixel has a non-zero alpha value (see the header comment).
  let hasAlpha = false;
  if (a.max !== 0) {
    for (let row = 0; row < height && !hasAlpha; row++) {
      const src = offset + row * stride;
      for (let x = 0; x < width; x++) {
        if ((pixel(src + x * bytesPerPixel) >>> a.shift) & a.max) {
          hasAlpha = true;
          break;
        }
      }
    }
  }
  const channels = hasAlpha ? 4 : 3;
  const out = new Uint8Array(width * height * channels);
  const data = Buffer.from(out.buffer, out.byteOffset, out.byteLength);
  let o = 0;
  const standardAlpha = masks[3] === 0xff000000 || masks[3] === 0;
  if (bpp === 32 && masks[0] === 0xff0000 && masks[1] === 0xff00 && masks[2] === 0xff && standardAlpha) {
    // The common BGRX / BGRA layout: plain byte copies.
    for (let row = 0; row < height; row++) {
      let s = offset + (topDown ? row : height - 1 - row) * stride;
      for (let x = 0; x < width; x++, s += 4) {
        out[o++] = b[s + 2] as number;
        out[o++] = b[s + 1] as number;
        out[o++] = b[s] as number;
        if (hasAlpha) out[o++] = b[s + 3] as number;
      }
    }
    return { data, width, height, channels };
  }
  for (let row = 0; row < height; row++) {
    let s = offset + (topDown ? row : height - 1 - row) * stride;
    for (let x = 0; x < width; x++, s += bytesPerPixel) {
      const px = pixel(s);
      out[o++] = r.max ? scale(r, px) : 0;
      out[o++] = g.max ? scale(g, px) : 0;
      out[o++] = bl.max ? scale(bl, px) : 0;
      if (hasAlpha) out[o++] = scale(a, px);
    }
  }
  return { data, width, height, channels };
}

function decodeRle(
  b: Uint8Array,
  offset: number,
  width: number,
  height: number,
  rle8: boolean,
  palette: Uint8Array,
): DecodedBitmap {
  // RGBA, initially transparent: pixels the stream skips stay transparent. Written as 32-bit words.
  const out = new Uint32Array(width * height);
  const colours = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    colours[i] = packRgba(palette[i * 3] ?? 0, palette[i * 3 + 1] ?? 0, palette[i * 3 + 2] ?? 0, 255);
  }
  const len = b.length;
  let x = 0;
  let y = 0; // rows counted from the bottom
  let p = offset;
  const put = (index: number, count: number): void => {
    // Writes `count` pixels of palette `index` at (x, y), clipped to the row.
    const n = y < height ? Math.min(count, width - x) : 0;
    if (n > 0) {
      const start = (height - 1 - y) * width + x;
      out.fill(colours[index] as number, start, start + n);
    }
    x += count;
  };
  while (y < height) {
    if (p + 2 > len) {
      // Tolerate a missing end-of-bitmap once the last row is complete; anything else is truncated.
      if (y === height - 1 && x >= width) break;
      fail('RLE data truncated');
    }
    const count = b[p] as number;
    const value = b[p + 1] as number;
    p += 2;
    if (count > 0) {
      // Encoded run; only the part inside the row is written, so the work is bounded by the output.
      if (rle8) {
        put(value, count);
      } else {
        const hi = value >>> 4;
        const lo = value & 0x0f;
        if (hi === lo) {
          put(hi, count);
        } else {
          const start = x;
          for (let i = 0; i < count && x < width; i++) put(i & 1 ? lo : hi, 1);
          x = start + count;
        }
      }
    } else if (value === 0) {
      x = 0; // end of line
      y++;
    } else if (value === 1) {
      break; // end of bitmap
    } else if (value === 2) {
      if (p + 2 > len) fail('RLE data truncated');
      x += b[p] as number;
      y += b[p + 1] as number;
      p += 2;
    } else {
      // Absolute run of `value` pixels, padded to a 16-bit boundary.
      const bytes = rle8 ? value : (value + 1) >>> 1;
      if (p + bytes > len) fail('RLE data truncated');
      const start = x;
      for (let i = 0; i < value && x < width; i++) {
        const byte = b[p + (rle8 ? i : i >>> 1)] as number;
        put(rle8 ? byte : i & 1 ? byte & 0x0f : byte >>> 4, 1);
      }
      x = start + value;
      p += bytes + (bytes & 1);
    }
  }
  return { data: Buffer.from(out.buffer, out.byteOffset, out.byteLength), width, height, channels: 4 };
}

const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/** One RGBA pixel as the 32-bit word whose bytes in memory are R, G, B, A. */
function packRgba(r: number, g: number, b: number, a: number): number {
  return LITTLE_ENDIAN
    ? (r | (g << 8) | (b << 16) | (a << 24)) >>> 0
    : ((r << 24) | (g << 16) | (b << 8) | a) >>> 0;
}
