import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import { BI, buildBmp, packRows } from '../../../test/fixtures/bmp.ts';
import { decodeBmp } from './bmp.ts';
import { decodeRgb } from './decode.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

type RGB = [number, number, number];
const RED: RGB = [255, 0, 0];
const GREEN: RGB = [0, 255, 0];
const BLUE: RGB = [0, 0, 255];
const WHITE: RGB = [255, 255, 255];
const GREY: RGB = [128, 128, 128];

/** Flattens rows of pixels (top to bottom) into the decoder's interleaved output. */
const flat = (rows: number[][][]): number[] => rows.flat(2);
const pixels = (buf: Buffer): number[] => [...buf];
const s5 = (v: number): number => Math.round((v * 255) / 31);
const s6 = (v: number): number => Math.round((v * 255) / 63);

function expectCode(fn: () => unknown, code: number): void {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).code).toBe(code);
    return;
  }
  throw new Error(`expected ApiError ${code}`);
}

describe('decodeBmp: palette images', () => {
  it('1-bit, bottom-up, INFO header', () => {
    const bmp = buildBmp({
      width: 3,
      height: 2,
      bpp: 1,
      palette: [RED, BLUE],
      pixelData: packRows(
        [
          [0, 1, 0],
          [1, 1, 0],
        ],
        1,
      ),
    });
    const out = decodeBmp(bmp);
    expect(out).toMatchObject({ width: 3, height: 2, channels: 3 });
    expect(pixels(out.data)).toEqual(
      flat([
        [RED, BLUE, RED],
        [BLUE, BLUE, RED],
      ]),
    );
  });

  it('2-bit and 4-bit, top-down', () => {
    const palette: RGB[] = [RED, GREEN, BLUE, WHITE];
    const rows = [
      [0, 1, 2, 3, 2],
      [3, 2, 1, 0, 1],
    ];
    const expected = flat(rows.map((r) => r.map((i) => palette[i] as RGB)));
    for (const bpp of [2, 4]) {
      const out = decodeBmp(
        buildBmp({ width: 5, height: -2, bpp, palette, pixelData: packRows(rows, bpp, true) }),
      );
      expect(pixels(out.data), `bpp ${bpp}`).toEqual(expected);
    }
  });

  it('8-bit with a short palette: indexes beyond it are black', () => {
    const out = decodeBmp(
      buildBmp({
        width: 3,
        height: 1,
        bpp: 8,
        colorsUsed: 2,
        palette: [GREY, GREEN],
        pixelData: packRows([[1, 0, 200]], 8),
      }),
    );
    expect(pixels(out.data)).toEqual(flat([[GREEN, GREY, [0, 0, 0]]]));
  });

  it('BITMAPCOREHEADER (3-byte palette entries) and both OS/2 2.x headers', () => {
    const rows = [
      [0, 1],
      [1, 0],
    ];
    const expected = flat([
      [RED, BLUE],
      [BLUE, RED],
    ]);
    for (const header of ['core', 'os2-16', 'os2-64'] as const) {
      const out = decodeBmp(
        buildBmp({ header, width: 2, height: 2, bpp: 8, palette: [RED, BLUE], pixelData: packRows(rows, 8) }),
      );
      expect(pixels(out.data), header).toEqual(expected);
    }
  });
});

describe('decodeBmp: direct colour', () => {
  const rows24 = [
    [0xff0000, 0x00ff00, 0x0000ff],
    [0x808080, 0xffffff, 0x010203],
  ];
  const expected24 = flat([
    [RED, GREEN, BLUE],
    [GREY, WHITE, [1, 2, 3]],
  ]);

  it('24-bit bottom-up and top-down (rows padded to 4 bytes)', () => {
    expect(
      pixels(decodeBmp(buildBmp({ width: 3, height: 2, bpp: 24, pixelData: packRows(rows24, 24) })).data),
    ).toEqual(expected24);
    expect(
      pixels(
        decodeBmp(buildBmp({ width: 3, height: -2, bpp: 24, pixelData: packRows(rows24, 24, true) })).data,
      ),
    ).toEqual(expected24);
  });

  it('24-bit with V4 and V5 headers', () => {
    for (const header of ['v4', 'v5'] as const) {
      const out = decodeBmp(
        buildBmp({ header, width: 3, height: 2, bpp: 24, pixelData: packRows(rows24, 24) }),
      );
      expect(pixels(out.data), header).toEqual(expected24);
    }
  });

  it('16-bit BI_RGB is X1R5G5B5', () => {
    const px = (r: number, g: number, b: number) => (r << 10) | (g << 5) | b;
    const out = decodeBmp(
      buildBmp({ width: 2, height: 1, bpp: 16, pixelData: packRows([[px(31, 0, 16), px(1, 15, 31)]], 16) }),
    );
    expect(out.channels).toBe(3);
    expect(pixels(out.data)).toEqual([255, 0, s5(16), s5(1), s5(15), 255]);
  });

  it('16-bit BI_BITFIELDS 5-6-5 (masks after an INFO header)', () => {
    const px = (r: number, g: number, b: number) => (r << 11) | (g << 5) | b;
    const out = decodeBmp(
      buildBmp({
        width: 2,
        height: 1,
        bpp: 16,
        compression: BI.BITFIELDS,
        masks: [0xf800, 0x07e0, 0x001f, 0],
        pixelData: packRows([[px(31, 63, 0), px(10, 21, 5)]], 16),
      }),
    );
    expect(pixels(out.data)).toEqual([255, 255, 0, s5(10), s6(21), s5(5)]);
  });

  it('16-bit A1R5G5B5 with a V3 header alpha mask', () => {
    const px = (a: number, r: number, g: number, b: number) => (a << 15) | (r << 10) | (g << 5) | b;
    const out = decodeBmp(
      buildBmp({
        header: 'v3',
        width: 2,
        height: 1,
        bpp: 16,
        compression: BI.BITFIELDS,
        masks: [0x7c00, 0x03e0, 0x001f, 0x8000],
        pixelData: packRows([[px(1, 31, 0, 0), px(0, 0, 0, 31)]], 16),
      }),
    );
    expect(out.channels).toBe(4);
    expect(pixels(out.data)).toEqual([255, 0, 0, 255, 0, 0, 255, 0]);
  });

  it('32-bit BI_RGB: an all-zero 4th byte means opaque (RGB output)', () => {
    const out = decodeBmp(
      buildBmp({ width: 2, height: 1, bpp: 32, pixelData: packRows([[0x00ff0000, 0x000000ff]], 32) }),
    );
    expect(out.channels).toBe(3);
    expect(pixels(out.data)).toEqual([255, 0, 0, 0, 0, 255]);
  });

  it('32-bit BI_RGB with non-zero 4th bytes: BGRA', () => {
    const out = decodeBmp(
      buildBmp({ width: 2, height: 1, bpp: 32, pixelData: packRows([[0x80ff0000, 0x000000ff]], 32) }),
    );
    expect(out.channels).toBe(4);
    expect(pixels(out.data)).toEqual([255, 0, 0, 128, 0, 0, 255, 0]);
  });

  it('32-bit BI_BITFIELDS in V4/V5 headers and BI_ALPHABITFIELDS after INFO (RGBA byte order)', () => {
    const masks: [number, number, number, number] = [0x000000ff, 0x0000ff00, 0x00ff0000, 0xff000000];
    const data = packRows([[0xff0000ff, 0x4000ff00]], 32); // red opaque, green at alpha 64
    const expected = [255, 0, 0, 255, 0, 255, 0, 64];
    for (const header of ['v4', 'v5'] as const) {
      const out = decodeBmp(
        buildBmp({ header, width: 2, height: 1, bpp: 32, compression: BI.BITFIELDS, masks, pixelData: data }),
      );
      expect(pixels(out.data), header).toEqual(expected);
    }
    const alpha = decodeBmp(
      buildBmp({ width: 2, height: 1, bpp: 32, compression: BI.ALPHABITFIELDS, masks, pixelData: data }),
    );
    expect(pixels(alpha.data)).toEqual(expected);
  });

  it('10-bit fields (2-10-10-10) scale to 8 bits', () => {
    const out = decodeBmp(
      buildBmp({
        header: 'v3',
        width: 1,
        height: 1,
        bpp: 32,
        compression: BI.BITFIELDS,
        masks: [0x3ff00000, 0x000ffc00, 0x000003ff, 0],
        pixelData: packRows([[(1023 << 20) | (512 << 10) | 0]], 32),
      }),
    );
    expect(pixels(out.data)).toEqual([255, Math.round((512 * 255) / 1023), 0]);
  });
});

describe('decodeBmp: RLE', () => {
  const palette: RGB[] = [RED, GREEN, BLUE, WHITE];
  const T = [0, 0, 0, 0]; // never written: transparent
  const o = (c: RGB) => [...c, 255];

  it('RLE8: runs, absolute mode with padding, delta, end of line, end of bitmap', () => {
    // 4×3, rows are stored bottom-up.
    const stream = [
      [0, 3, 1, 2, 3, 0], // bottom row: absolute GREEN BLUE WHITE + pad
      [1, 0], // 1 × RED
      [0, 0], // end of line
      [1, 3], // 1 × WHITE
      [0, 2, 1, 1], // delta: x + 1, y + 1 → top row, x = 2
      [2, 2], // 2 × BLUE
      [0, 1], // end of bitmap
    ].flat();
    const out = decodeBmp(
      buildBmp({
        width: 4,
        height: 3,
        bpp: 8,
        compression: BI.RLE8,
        palette,
        pixelData: Uint8Array.from(stream),
      }),
    );
    expect(out.channels).toBe(4);
    expect(pixels(out.data)).toEqual(
      [
        [T, T, o(BLUE), o(BLUE)],
        [o(WHITE), T, T, T],
        [o(GREEN), o(BLUE), o(WHITE), o(RED)],
      ].flat(2),
    );
  });

  it('RLE4: alternating nibbles in runs and absolute mode', () => {
    // 5×2.
    const stream = [
      [5, 0x12], // bottom row: 1 2 1 2 1
      [0, 0], // end of line
      [0, 5, 0x30, 0x12, 0x30, 0], // absolute: 3 0 1 2 3 (3 bytes) + pad
      [0, 1], // end of bitmap
    ].flat();
    const out = decodeBmp(
      buildBmp({
        width: 5,
        height: 2,
        bpp: 4,
        compression: BI.RLE4,
        palette,
        pixelData: Uint8Array.from(stream),
      }),
    );
    expect(pixels(out.data)).toEqual(
      [
        [o(WHITE), o(RED), o(GREEN), o(BLUE), o(WHITE)],
        [o(GREEN), o(BLUE), o(GREEN), o(BLUE), o(GREEN)],
      ].flat(2),
    );
  });

  it('clips runs longer than the row instead of overrunning', () => {
    const out = decodeBmp(
      buildBmp({
        width: 2,
        height: 1,
        bpp: 8,
        compression: BI.RLE8,
        palette,
        pixelData: Uint8Array.from([255, 2, 0, 1]),
      }),
    );
    expect(pixels(out.data)).toEqual([...o(BLUE), ...o(BLUE)]);
  });

  it('refuses a stream that ends before the image does', () => {
    expectCode(
      () =>
        decodeBmp(
          buildBmp({
            width: 2,
            height: 2,
            bpp: 8,
            compression: BI.RLE8,
            palette,
            pixelData: Uint8Array.from([2, 1, 0, 0]),
          }),
        ),
      4005,
    );
  });
});

describe('decodeBmp: malformed input → 4005, oversize → 4004', () => {
  const good = buildBmp({
    width: 3,
    height: 2,
    bpp: 24,
    pixelData: packRows(
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
      24,
    ),
  });

  it('refuses truncated pixel data and truncated headers', () => {
    expectCode(() => decodeBmp(good.subarray(0, good.length - 4)), 4005);
    expectCode(() => decodeBmp(good.subarray(0, 30)), 4005);
    expectCode(() => decodeBmp(good.subarray(0, 2)), 4005);
  });

  it('accepts a last row without its padding', () => {
    expect(decodeBmp(good.subarray(0, good.length - 3)).width).toBe(3);
  });

  it('refuses unsupported or inconsistent headers', () => {
    const cases: Array<[string, Buffer]> = [
      [
        'embedded JPEG',
        buildBmp({ width: 1, height: 1, bpp: 0, compression: BI.JPEG, pixelData: new Uint8Array(8) }),
      ],
      [
        'embedded PNG',
        buildBmp({ width: 1, height: 1, bpp: 0, compression: BI.PNG, pixelData: new Uint8Array(8) }),
      ],
      ['64-bit', buildBmp({ width: 1, height: 1, bpp: 64, pixelData: new Uint8Array(8) })],
      [
        'RLE8 at 4 bits',
        buildBmp({
          width: 1,
          height: 1,
          bpp: 4,
          compression: BI.RLE8,
          palette: [RED],
          pixelData: new Uint8Array(4),
        }),
      ],
      [
        'top-down RLE',
        buildBmp({
          width: 1,
          height: -1,
          bpp: 8,
          compression: BI.RLE8,
          palette: [RED],
          pixelData: Uint8Array.from([1, 0, 0, 1]),
        }),
      ],
      [
        'bit fields at 24 bits',
        buildBmp({
          width: 1,
          height: 1,
          bpp: 24,
          compression: BI.BITFIELDS,
          masks: [0xff, 0xff00, 0xff0000, 0],
          pixelData: new Uint8Array(4),
        }),
      ],
      [
        'non-contiguous mask',
        buildBmp({
          width: 1,
          height: 1,
          bpp: 16,
          compression: BI.BITFIELDS,
          masks: [0x7c01, 0x03e0, 0x001f, 0],
          pixelData: new Uint8Array(4),
        }),
      ],
      [
        'OS/2 Huffman 1D',
        buildBmp({
          header: 'os2-64',
          width: 1,
          height: 1,
          bpp: 1,
          compression: 3,
          palette: [RED, BLUE],
          pixelData: new Uint8Array(4),
        }),
      ],
      ['zero width', buildBmp({ width: 0, height: 1, bpp: 24, pixelData: new Uint8Array(4) })],
      ['negative width', buildBmp({ width: -1, height: 1, bpp: 24, pixelData: new Uint8Array(4) })],
      [
        'palette image without palette',
        buildBmp({ width: 1, height: 1, bpp: 8, pixelData: new Uint8Array(4) }),
      ],
    ];
    for (const [name, bmp] of cases) {
      try {
        decodeBmp(bmp);
        throw new Error(`${name}: decoded`);
      } catch (err) {
        expect(err, name).toBeInstanceOf(ApiError);
        expect((err as ApiError).code, name).toBe(4005);
      }
    }
  });

  it('refuses an unknown DIB header size', () => {
    const bmp = Buffer.from(good);
    bmp.writeUInt32LE(41, 14);
    expectCode(() => decodeBmp(bmp), 4005);
  });

  it('refuses a huge header before allocating (4004)', () => {
    const bmp = buildBmp({ width: 100_000, height: 100_000, bpp: 24, pixelData: new Uint8Array(16) });
    const before = process.memoryUsage().arrayBuffers;
    expectCode(() => decodeBmp(bmp), 4004);
    // Nothing near the 30 GB the header claims (or any pixel buffer at all) was allocated.
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(1024 * 1024);
  });
});

describe('BMP through the pipeline', () => {
  it('is sniffed, probed and decoded to RGB, alpha flattened onto the background', async () => {
    const bmp = buildBmp({
      header: 'v5',
      width: 2,
      height: -1,
      bpp: 32,
      compression: BI.BITFIELDS,
      masks: [0x00ff0000, 0x0000ff00, 0x000000ff, 0xff000000],
      pixelData: packRows([[0xffff0000, 0x000000ff]], 32, true), // opaque red, transparent blue
    });
    expect(await sniffFormat(bmp)).toBe('bmp');
    const probed = probeHeader(bmp, 'bmp');
    expect(probed).toEqual({ format: 'bmp', width: 2, height: 1, frames: 1 });
    const onWhite = await decodeRgb(bmp, probed);
    expect([...onWhite.rgb]).toEqual([255, 0, 0, 255, 255, 255]);
    const onBlack = await decodeRgb(bmp, probed, { background: 'black' });
    expect([...onBlack.rgb]).toEqual([255, 0, 0, 0, 0, 0]);
  });

  it('a bottom-up 8-bit BMP decodes upright', async () => {
    const bmp = buildBmp({
      width: 1,
      height: 2,
      bpp: 8,
      palette: [RED, BLUE],
      pixelData: packRows([[0], [1]], 8),
    });
    const decoded = await decodeRgb(bmp, probeHeader(bmp, 'bmp'));
    expect([...decoded.rgb]).toEqual([...RED, ...BLUE]);
  });
});
