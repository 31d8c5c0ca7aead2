// The TIFF header (classic and BigTIFF, either byte order): the first page's size, the pages of the IFD
// chain (loops detected, count capped), the bytes of the first page's pixels, and whether its strips lie
// inside the data.

import { Bytes, type Dims, HeaderError } from './probe-bytes.ts';

/** Pages a TIFF may have (loops are detected explicitly): more is 4005. */
const MAX_TIFF_PAGES = 65_535;

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

export function checkTiffData(r: Bytes): void {
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

export function probeTiff(r: Bytes): Dims {
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

/**
 * Width and height of each of the first `count` pages of a TIFF (for what scoring several pages costs),
 * from their directories; a page whose directory is missing or gives no size is reported 0 × 0 and
 * refused by the caller.
 */
export function tiffPageSizes(bytes: Uint8Array, count: number): Array<{ width: number; height: number }> {
  const r = new Bytes(bytes);
  const { t, first, ifd } = firstTiffIfd(r);
  const sizes: Array<{ width: number; height: number }> = [];
  const seen = new Set<number>([first]);
  let page: Ifd | undefined = ifd;
  while (page && sizes.length < count) {
    sizes.push({ width: tiffTagValue(r, t, page, 256) ?? 0, height: tiffTagValue(r, t, page, 257) ?? 0 });
    const next: number = page.next;
    if (next === 0 || seen.has(next)) break;
    seen.add(next);
    page = readIfd(r, t, next);
  }
  while (sizes.length < count) sizes.push({ width: 0, height: 0 });
  return sizes;
}
