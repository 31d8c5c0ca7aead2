// The decoding estimates, against hand-computed figures for headers of each kind.

import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { decodeMemoryBytes } from './decode-memory.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

const MiB = 1024 * 1024;
const PER_IMAGE = 16 * MiB;

async function estimate(bytes: Buffer) {
  const probed = probeHeader(bytes, await sniffFormat(bytes), {
    jpeg: { maxEdge: 30_000, maxPixels: 200_000_000 },
    other: { maxEdge: 30_000, maxPixels: 200_000_000 },
  });
  return decodeMemoryBytes(bytes, probed);
}

const grey = (width: number, height: number, channels: 3 | 4 = 3) =>
  sharp({ create: { width, height, channels, background: { r: 90, g: 90, b: 90, alpha: 1 } } });

describe('decodeMemoryBytes', () => {
  it('JPEG, one scan: the decoded pixels only (3 bytes each)', async () => {
    const bytes = await grey(800, 600).jpeg().toBuffer();
    expect(await estimate(bytes)).toBe(800 * 600 * 3 + PER_IMAGE);
  });

  it('JPEG, progressive 4:4:4: every coefficient of the three components (2 bytes each) as well', async () => {
    const bytes = await grey(800, 600).jpeg({ progressive: true, chromaSubsampling: '4:4:4' }).toBuffer();
    expect(await estimate(bytes)).toBe(800 * 600 * 3 * 2 + 800 * 600 * 3 + PER_IMAGE);
  });

  it('JPEG, progressive 4:2:0: chroma coefficients at a quarter, whole 16x16 MCUs', async () => {
    const bytes = await grey(801, 600).jpeg({ progressive: true, chromaSubsampling: '4:2:0' }).toBuffer();
    // 51 x 38 MCUs of 16x16: luma 4 blocks, each chroma 1 block, 64 coefficients of 2 bytes.
    expect(await estimate(bytes)).toBe(51 * 38 * 6 * 64 * 2 + 801 * 600 * 3 + PER_IMAGE);
  });

  it('JPEG over 16 MP: shrunk on load, so only an eighth of each edge is decoded (twice: libjpeg, libvips)', async () => {
    const bytes = await grey(4100, 4000).jpeg().toBuffer();
    expect(await estimate(bytes)).toBe(((4100 * 4000 * 3) / 64) * 2 + PER_IMAGE);
  });

  it('PNG: the file depth and channels, then 8-bit RGBA', async () => {
    // sharp writes a pHYs chunk: 9 bytes kept, with a record of 64, counted as ancillary.
    const pHYs = (9 + 64) * 8;
    const rgba8 = await grey(300, 200, 4).png().toBuffer();
    expect(await estimate(rgba8)).toBe(300 * 200 * (4 + 4) + pHYs + PER_IMAGE);
    const rgba16 = await grey(300, 200, 4).png().toColourspace('rgb16').toBuffer();
    expect(await estimate(rgba16)).toBe(300 * 200 * (8 + 4) + pHYs + PER_IMAGE);
  });

  it('GIF: two RGBA frames and a record per frame; WebP: 12 bytes a pixel; TIFF: at least 12, more for wide samples, and 256 bytes a page', async () => {
    // One frame: 128 bytes of frame record.
    expect(await estimate(await grey(300, 200).gif().toBuffer())).toBe(300 * 200 * 8 + 128 + PER_IMAGE);
    expect(await estimate(await grey(300, 200).webp().toBuffer())).toBe(300 * 200 * 12 + PER_IMAGE);
    expect(await estimate(await grey(300, 200).tiff().toBuffer())).toBe(300 * 200 * 12 + 256 + PER_IMAGE);
    // 32-bit float RGBA: 16 bytes a pixel as stored, plus the 8-bit RGBA.
    const float = await grey(300, 200, 4).raw().toBuffer();
    const floatTiff = await sharp(new Float32Array(float), { raw: { width: 300, height: 200, channels: 4 } })
      .toColourspace('scrgb')
      .tiff({ compression: 'deflate' })
      .toBuffer();
    expect(await estimate(floatTiff)).toBe(300 * 200 * (16 + 4) + 256 + PER_IMAGE);
  });

  it('JPEG metadata: every byte of its APPn and COM segments, three times', async () => {
    const base = await grey(64, 64).jpeg().toBuffer();
    const app1 = Buffer.concat([Buffer.from([0xff, 0xe1, 0x27, 0x12]), Buffer.alloc(10_000)]);
    const com = Buffer.concat([Buffer.from([0xff, 0xfe, 0x03, 0xea]), Buffer.alloc(1000)]);
    const withMetadata = Buffer.concat([base.subarray(0, 2), app1, com, base.subarray(2)]);
    expect((await estimate(withMetadata)) - (await estimate(base))).toBe((10_000 + 1000) * 3);
  });

  it('PNG chunks the decoder keeps, before or after the image data: their bytes and a record, eight times; others nothing', async () => {
    const plain = await grey(64, 64).png().toBuffer();
    const text = Buffer.concat([
      Buffer.from([0, 0, 0x27, 0x10]),
      Buffer.from('tEXt'),
      Buffer.alloc(10_000),
      Buffer.alloc(4),
    ]);
    const iend = plain.length - 12;
    const withText = Buffer.concat([
      plain.subarray(0, 33),
      text,
      plain.subarray(33, iend),
      text,
      plain.subarray(iend),
    ]);
    const ancillary = (await estimate(withText)) - (await estimate(plain));
    // sharp's own PNG carries no ancillary chunk but what it always writes; compare to it.
    expect(ancillary).toBe(2 * (10_000 + 64) * 8);
    // An unknown chunk libspng skips costs nothing, however large.
    const unknown = Buffer.concat([text.subarray(0, 4), Buffer.from('zzZz'), text.subarray(8)]);
    const withUnknown = Buffer.concat([plain.subarray(0, 33), unknown, plain.subarray(33)]);
    expect(await estimate(withUnknown)).toBe(await estimate(plain));
  });
});
