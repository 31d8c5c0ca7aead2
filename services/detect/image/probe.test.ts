import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import { buildBmp, packRows } from '../../../test/fixtures/bmp.ts';
import { probeHeader } from './probe.ts';
import type { ImageFormat } from './types.ts';

function probeCode(bytes: Uint8Array, format: ImageFormat): number | object {
  try {
    return probeHeader(bytes, format);
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return (err as ApiError).code;
  }
}

// ------------------------------------------------------------------ tiny header writers

const u16be = (v: number) => [(v >>> 8) & 0xff, v & 0xff];
const u16le = (v: number) => [v & 0xff, (v >>> 8) & 0xff];
const u32be = (v: number) => [(v >>> 24) & 0xff, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff];
const u32le = (v: number) => [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff];
const u24le = (v: number) => [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff];
const ascii = (s: string) => Array.from(s, (c) => c.charCodeAt(0));

const PNG_SIG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const pngChunk = (type: string, data: number[]) => [
  ...u32be(data.length),
  ...ascii(type),
  ...data,
  0,
  0,
  0,
  0,
];
const png = (width: number, height: number, extra: number[] = [], bitDepth = 8, colourType = 2) =>
  Uint8Array.from([
    ...PNG_SIG,
    ...pngChunk('IHDR', [...u32be(width), ...u32be(height), bitDepth, colourType, 0, 0, 0]),
    ...extra,
    ...pngChunk('IDAT', [0]),
  ]);

const jpeg = (segments: number[]) => Uint8Array.from([0xff, 0xd8, ...segments]);
const sof = (width: number, height: number, marker = 0xc0) => [
  0xff,
  marker,
  ...u16be(11),
  8,
  ...u16be(height),
  ...u16be(width),
  1,
  1,
  0x11,
  0,
];
const app = (n: number, payload: number[]) => [0xff, 0xe0 + n, ...u16be(payload.length + 2), ...payload];

const gif = (screenW: number, screenH: number, blocks: number[]) =>
  Uint8Array.from([...ascii('GIF89a'), ...u16le(screenW), ...u16le(screenH), 0, 0, 0, ...blocks]);
const gifFrame = (left: number, top: number, w: number, h: number) => [
  0x2c,
  ...u16le(left),
  ...u16le(top),
  ...u16le(w),
  ...u16le(h),
  0,
  2,
  2,
  0x4c,
  0x01,
  0,
];
const gifExtension = [0x21, 0xf9, 4, 0, 0, 0, 0, 0];

const riff = (chunks: number[]) =>
  Uint8Array.from([...ascii('RIFF'), ...u32le(chunks.length + 4), ...ascii('WEBP'), ...chunks]);
const webpChunk = (fourcc: string, data: number[]) => [
  ...ascii(fourcc),
  ...u32le(data.length),
  ...data,
  ...(data.length & 1 ? [0] : []),
];

/** Little-endian classic TIFF with one IFD per entry of `pages` ([width, height]); `next` overrides the chain. */
function tiff(
  pages: Array<[number, number]>,
  opts: { loopTo?: number; bigEndian?: boolean } = {},
): Uint8Array {
  const be = opts.bigEndian ?? false;
  const w16 = (v: number) => (be ? u16be(v) : u16le(v));
  const w32 = (v: number) => (be ? u32be(v) : u32le(v));
  const ifdSize = 2 + 2 * 12 + 4;
  const out: number[] = [...(be ? ascii('MM') : ascii('II')), ...w16(42), ...w32(8)];
  pages.forEach(([w, h], i) => {
    const next =
      i + 1 < pages.length
        ? 8 + (i + 1) * ifdSize
        : opts.loopTo !== undefined
          ? 8 + opts.loopTo * ifdSize
          : 0;
    out.push(...w16(2));
    out.push(...w16(256), ...w16(4), ...w32(1), ...w32(w)); // ImageWidth LONG
    out.push(...w16(257), ...w16(3), ...w32(1), ...w16(h), 0, 0); // ImageLength SHORT
    out.push(...w32(next));
  });
  return Uint8Array.from(out);
}

// ------------------------------------------------------------------ tests

describe('probeHeader: PNG', () => {
  it('reads IHDR', () => {
    expect(probeHeader(png(640, 480), 'png')).toEqual({ format: 'png', width: 640, height: 480, frames: 1 });
  });

  it('counts APNG frames from acTL', () => {
    const actl = pngChunk('acTL', [...u32be(12), ...u32be(0)]);
    expect(probeHeader(png(10, 10, actl), 'png').frames).toBe(12);
  });

  it('refuses zero, truncated and inconsistent headers with 4005', () => {
    expect(probeCode(png(0, 10), 'png')).toBe(4005);
    expect(probeCode(png(10, 0), 'png')).toBe(4005);
    expect(probeCode(png(10, 10).subarray(0, 20), 'png')).toBe(4005); // cut inside the size
    expect(probeCode(png(10, 10, [], 3, 2), 'png')).toBe(4005); // 3-bit RGB does not exist
    expect(probeCode(png(0x80000000, 1), 'png')).toBe(4005);
    const noIhdr = Uint8Array.from([
      ...PNG_SIG,
      ...pngChunk('IDAT', [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ]);
    expect(probeCode(noIhdr, 'png')).toBe(4005);
  });
});

describe('probeHeader: JPEG', () => {
  it('walks markers to the frame header', () => {
    const bytes = jpeg([
      ...app(0, ascii('JFIF\0')),
      ...app(1, new Array(300).fill(7)),
      ...sof(1200, 800, 0xc2),
    ]);
    expect(probeHeader(bytes, 'jpeg')).toEqual({ format: 'jpeg', width: 1200, height: 800, frames: 1 });
  });

  it('tolerates fill bytes and stray bytes before a marker, like libjpeg', () => {
    expect(probeHeader(jpeg([0xff, 0xff, 0x00, 0x13, ...sof(5, 6)]), 'jpeg')).toMatchObject({
      width: 5,
      height: 6,
    });
  });

  it('ignores SOF-like bytes inside other segments', () => {
    expect(probeHeader(jpeg([...app(1, sof(60000, 60000)), ...sof(7, 8)]), 'jpeg')).toMatchObject({
      width: 7,
      height: 8,
    });
  });

  it('refuses a missing, late, zero or cut-off frame header with 4005', () => {
    expect(probeCode(jpeg([...app(0, [1, 2, 3]), 0xff, 0xd9]), 'jpeg')).toBe(4005); // EOI first
    expect(probeCode(jpeg([0xff, 0xda, 0, 2, ...sof(5, 5)]), 'jpeg')).toBe(4005); // scan before SOF
    expect(probeCode(jpeg(sof(100, 0)), 'jpeg')).toBe(4005); // DNL height
    expect(probeCode(jpeg(sof(100, 100)).subarray(0, 9), 'jpeg')).toBe(4005);
    expect(probeCode(jpeg([0xff, 0xe1, 0x25, 0x48, 1, 2, 3]), 'jpeg')).toBe(4005); // segment runs past the end
    expect(probeCode(jpeg([0xff, 0xe1, 0x00, 0x01]), 'jpeg')).toBe(4005); // length < 2
  });

  it('applies the JPEG limits: edge <= 30000 and <= 200,000,000 px', () => {
    expect(probeCode(jpeg(sof(30000, 6666)), 'jpeg')).toMatchObject({ width: 30000, height: 6666 });
    expect(probeCode(jpeg(sof(30001, 10)), 'jpeg')).toBe(4004);
    expect(probeCode(jpeg(sof(20000, 10000)), 'jpeg')).toMatchObject({ width: 20000 }); // exactly 200M
    expect(probeCode(jpeg(sof(20000, 10001)), 'jpeg')).toBe(4004);
  });
});

describe('probeHeader: limits of the other formats', () => {
  it('edge <= 8192 and <= 36,000,000 px; the message names the size and the limit', () => {
    expect(probeCode(png(8192, 4394), 'png')).toMatchObject({ width: 8192 });
    expect(probeCode(png(6000, 6000), 'png')).toMatchObject({ width: 6000 }); // exactly 36M
    expect(probeCode(png(6001, 6000), 'png')).toBe(4004);
    expect(probeCode(png(8193, 1), 'png')).toBe(4004);
    expect(() => probeHeader(png(8193, 2), 'png')).toThrow(/8193x2.*8192/);
  });

  it('honours configured limits', () => {
    const limits = { jpeg: { maxEdge: 100, maxPixels: 5000 }, other: { maxEdge: 50, maxPixels: 2000 } };
    expect(() => probeHeader(png(51, 1), 'png', limits)).toThrow(ApiError);
    expect(() => probeHeader(jpeg(sof(80, 80)), 'jpeg', limits)).toThrow(ApiError);
    expect(probeHeader(jpeg(sof(100, 50)), 'jpeg', limits).width).toBe(100);
  });
});

describe('probeHeader: GIF', () => {
  it('reads the screen and counts frames by walking blocks', () => {
    const bytes = gif(20, 10, [
      ...gifExtension,
      ...gifFrame(0, 0, 20, 10),
      ...gifExtension,
      ...gifFrame(0, 0, 20, 10),
      0x3b,
    ]);
    expect(probeHeader(bytes, 'gif')).toEqual({ format: 'gif', width: 20, height: 10, frames: 2 });
  });

  it('grows the size to frames that reach outside the screen (the decoder does too)', () => {
    expect(probeHeader(gif(0, 0, [...gifFrame(2, 3, 10, 10), 0x3b]), 'gif')).toMatchObject({
      width: 12,
      height: 13,
    });
    expect(probeCode(gif(10, 10, [...gifFrame(60000, 0, 5000, 10), 0x3b]), 'gif')).toBe(4004);
  });

  it('tolerates a missing trailer and a cut-off later frame; counts only whole frames', () => {
    const two = gif(4, 4, [...gifFrame(0, 0, 4, 4), ...gifFrame(0, 0, 4, 4)]);
    expect(probeHeader(two, 'gif').frames).toBe(2);
    expect(probeHeader(two.subarray(0, two.length - 3), 'gif').frames).toBe(1);
  });

  it('refuses a GIF without a whole first frame with 4005', () => {
    expect(probeCode(gif(4, 4, [0x3b]), 'gif')).toBe(4005);
    const one = gif(4, 4, [...gifFrame(0, 0, 4, 4), 0x3b]);
    expect(probeCode(one.subarray(0, one.length - 3), 'gif')).toBe(4005);
    expect(probeCode(one.subarray(0, 12), 'gif')).toBe(4005);
  });
});

describe('probeHeader: WebP', () => {
  it('reads VP8, VP8L and VP8X headers', () => {
    const vp8 = riff(webpChunk('VP8 ', [0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, ...u16le(300), ...u16le(200)]));
    expect(probeHeader(vp8, 'webp')).toEqual({ format: 'webp', width: 300, height: 200, frames: 1 });
    const bits = (300 - 1) | ((200 - 1) << 14);
    const vp8l = riff(webpChunk('VP8L', [0x2f, ...u32le(bits)]));
    expect(probeHeader(vp8l, 'webp')).toMatchObject({ width: 300, height: 200 });
    const vp8x = riff(webpChunk('VP8X', [0x10, 0, 0, 0, ...u24le(1023), ...u24le(767)]));
    expect(probeHeader(vp8x, 'webp')).toMatchObject({ width: 1024, height: 768, frames: 1 });
  });

  it('counts ANMF frames of an animated WebP', () => {
    const frame = webpChunk('ANMF', new Array(17).fill(0));
    const bytes = riff([
      ...webpChunk('VP8X', [0x02, 0, 0, 0, ...u24le(99), ...u24le(49)]),
      ...webpChunk('ANIM', [0, 0, 0, 0, 0, 0]),
      ...frame,
      ...frame,
      ...frame,
    ]);
    expect(probeHeader(bytes, 'webp')).toMatchObject({ width: 100, height: 50, frames: 3 });
  });

  it('refuses broken or oversize headers', () => {
    expect(probeCode(riff(webpChunk('VP8X', [0x02, 0, 0, 0, ...u24le(9), ...u24le(9)])), 'webp')).toBe(4005); // no ANMF
    expect(probeCode(riff(webpChunk('VP8 ', [0, 0, 0, 1, 2, 3, 1, 0, 1, 0])), 'webp')).toBe(4005); // start code
    expect(probeCode(riff(webpChunk('VP8L', [0x2e, 0, 0, 0, 0])), 'webp')).toBe(4005); // signature
    expect(probeCode(riff(webpChunk('ALPH', [0, 0, 0, 0, 0, 0, 0, 0, 0, 0])), 'webp')).toBe(4005);
    expect(probeCode(riff(webpChunk('VP8X', [0, 0, 0, 0, ...u24le(16383), ...u24le(16383)])), 'webp')).toBe(
      4004,
    );
    expect(probeCode(riff([]), 'webp')).toBe(4005);
  });
});

describe('probeHeader: BMP', () => {
  it('reads INFO and CORE headers; negative height is top-down', () => {
    const bottomUp = buildBmp({
      width: 3,
      height: 2,
      bpp: 24,
      pixelData: packRows(
        [
          [0, 0, 0],
          [0, 0, 0],
        ],
        24,
      ),
    });
    expect(probeHeader(bottomUp, 'bmp')).toEqual({ format: 'bmp', width: 3, height: 2, frames: 1 });
    const topDown = buildBmp({
      width: 3,
      height: -2,
      bpp: 24,
      pixelData: packRows(
        [
          [0, 0, 0],
          [0, 0, 0],
        ],
        24,
        true,
      ),
    });
    expect(probeHeader(topDown, 'bmp')).toMatchObject({ width: 3, height: 2 });
    const core = buildBmp({ header: 'core', width: 4, height: 5, bpp: 24, pixelData: new Uint8Array(80) });
    expect(probeHeader(core, 'bmp')).toMatchObject({ width: 4, height: 5 });
  });

  it('refuses invalid sizes (4005) and oversize headers (4004) without reading pixels', () => {
    expect(probeCode(buildBmp({ width: 0, height: 5, bpp: 24, pixelData: new Uint8Array(0) }), 'bmp')).toBe(
      4005,
    );
    expect(probeCode(buildBmp({ width: -3, height: 5, bpp: 24, pixelData: new Uint8Array(0) }), 'bmp')).toBe(
      4005,
    );
    expect(
      probeCode(buildBmp({ width: 3, height: -0x80000000, bpp: 24, pixelData: new Uint8Array(0) }), 'bmp'),
    ).toBe(4005);
    expect(
      probeCode(buildBmp({ width: 10000, height: 10, bpp: 24, pixelData: new Uint8Array(0) }), 'bmp'),
    ).toBe(4004);
    expect(probeCode(Uint8Array.from(ascii('BM')), 'bmp')).toBe(4005);
  });
});

describe('probeHeader: TIFF', () => {
  it('reads the first IFD and counts pages, either byte order', () => {
    expect(
      probeHeader(
        tiff([
          [30, 20],
          [10, 10],
          [5, 5],
        ]),
        'tiff',
      ),
    ).toEqual({ format: 'tiff', width: 30, height: 20, frames: 3 });
    expect(probeHeader(tiff([[30, 20]], { bigEndian: true }), 'tiff')).toMatchObject({
      width: 30,
      height: 20,
      frames: 1,
    });
  });

  it('stops at an IFD loop (two pages, not the page cap)', () => {
    expect(
      probeHeader(
        tiff(
          [
            [30, 20],
            [10, 10],
          ],
          { loopTo: 0 },
        ),
        'tiff',
      ).frames,
    ).toBe(2);
    expect(
      probeHeader(
        tiff(
          [
            [30, 20],
            [10, 10],
          ],
          { loopTo: 1 },
        ),
        'tiff',
      ).frames,
    ).toBe(2);
  });

  it('reads BigTIFF', () => {
    const b: number[] = [...ascii('II'), ...u16le(43), ...u16le(8), 0, 0, ...u32le(16), 0, 0, 0, 0];
    b.push(...u32le(2), 0, 0, 0, 0); // entry count (8 bytes)
    b.push(...u16le(256), ...u16le(16), ...u32le(1), 0, 0, 0, 0, ...u32le(4000), 0, 0, 0, 0); // LONG8
    b.push(...u16le(257), ...u16le(3), ...u32le(1), 0, 0, 0, 0, ...u16le(3000), 0, 0, 0, 0, 0, 0);
    b.push(0, 0, 0, 0, 0, 0, 0, 0); // next IFD
    expect(probeHeader(Uint8Array.from(b), 'tiff')).toEqual({
      format: 'tiff',
      width: 4000,
      height: 3000,
      frames: 1,
    });
  });

  it('refuses an out-of-range first IFD, missing size tags or zero sizes with 4005', () => {
    expect(probeCode(Uint8Array.from([...ascii('II'), ...u16le(42), ...u32le(1000)]), 'tiff')).toBe(4005);
    expect(probeCode(tiff([[0, 20]]), 'tiff')).toBe(4005);
    const noTags = Uint8Array.from([...ascii('II'), ...u16le(42), ...u32le(8), 0, 0, 0, 0, 0, 0]);
    expect(probeCode(noTags, 'tiff')).toBe(4005);
    expect(probeCode(tiff([[9000, 20]]), 'tiff')).toBe(4004);
    expect(probeCode(tiff([[100, 100]]).subarray(0, 20), 'tiff')).toBe(4005);
  });
});
