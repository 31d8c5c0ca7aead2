// The decode-memory estimate is an upper bound: each kind of image is decoded the way a scoring worker
// decodes it, in a process of its own (decode-peak-child.ts), and the peak resident memory the decode
// added, as the kernel counts it (VmHWM after clear_refs), must not exceed the estimate the work gate
// admits it by. Images are large enough (mostly 12–36 MP) that the per-pixel terms, not the fixed
// per-image bytes, decide. Prints the table docs/image-cost.md quotes.
//
// The 196 MP progressive 4:4:4 JPEG (the largest allowed image's coefficient buffer, ~1.2 GB) is decoded
// here too, by both decoders: ~5 s and ~1.3 GB each.

import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp, { type Sharp } from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BI, buildBmp } from '../../../test/fixtures/bmp.ts';
import { spawnChild } from '../../../test/support/children.ts';
import { type HostileImageName, hostileImage } from '../../../test/support/hostile-images.ts';
import { REPO } from '../../../test/support/paths.ts';
import { prng } from '../../../test/support/prng.ts';
import type { JpegDecoder } from './libjpeg/jpeg-tensor.ts';
import { libjpegUnavailable } from './libjpeg/jpeg-tensor.ts';

const CHILD = new URL('decode-peak-child.ts', import.meta.url).pathname;
const DIR = join(REPO, 'test-artifacts', 'decode-peak');
const MiB = 1024 * 1024;

interface Measured {
  estimate: number;
  peak: number;
  cpuMs: number;
  decoder: JpegDecoder;
  declined?: string;
}

async function measure(path: string, decoder: JpegDecoder): Promise<Measured> {
  const child = spawnChild('decode peak', process.execPath, ['--import', 'tsx', CHILD, path, decoder]);
  const code = await child.exited;
  const line = child
    .output()
    .split('\n')
    .find((l) => l.startsWith('{'));
  if (code !== 0 || !line)
    throw new Error(`decode-peak-child exited ${code}: ${child.output().slice(-2000)}`);
  return JSON.parse(line) as Measured;
}

/** Photo-like RGB noise over gradients: compresses like a photograph, not like a flat fill. */
function photo(width: number, height: number, channels: 3 | 4 = 3): Sharp {
  const random = prng(width + height);
  const raw = Buffer.alloc(width * height * channels);
  for (let i = 0, y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      for (let k = 0; k < channels; k++, i++)
        raw[i] = k === 3 ? 128 + ((x ^ y) & 127) : (x * (k + 1) + y + Math.floor(random() * 40)) & 0xff;
  return sharp(raw, { raw: { width, height, channels } });
}

function bmp(width: number, height: number, bpp: 24 | 32): Buffer {
  const stride = Math.ceil((width * bpp) / 32) * 4;
  const pixelData = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < (width * bpp) / 8; x++) pixelData[y * stride + x] = (x + y * 3) & 0xff;
  return buildBmp({
    header: bpp === 32 ? 'v4' : 'info',
    width,
    height,
    bpp,
    pixelData,
    ...(bpp === 32 ? { compression: BI.BITFIELDS, masks: [0xff0000, 0xff00, 0xff, 0xff000000] } : {}),
  });
}

type Source = () => Promise<Buffer>;
const hostile =
  (name: HostileImageName): Source =>
  () =>
    hostileImage(name);

// Each kind of image the service decodes, and which decoders it goes through (the fast path declines some).
const CASES: Array<{ name: string; make: Source; decoders: JpegDecoder[] }> = [
  {
    name: 'JPEG baseline 4:2:0 12 MP',
    make: () => photo(4000, 3000).jpeg().toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG baseline 4:4:4 16 MP',
    make: () => photo(4000, 4000).jpeg({ chromaSubsampling: '4:4:4' }).toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG baseline 4:2:0 24 MP (shrunk on load)',
    make: () => photo(6000, 4000).jpeg().toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG progressive 4:2:0 12 MP',
    make: () => photo(4000, 3000).jpeg({ progressive: true }).toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG progressive 4:4:4 16 MP',
    make: () => photo(4000, 4000).jpeg({ progressive: true, chromaSubsampling: '4:4:4' }).toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG progressive CMYK 6 MP',
    make: () => photo(3000, 2000).toColourspace('cmyk').jpeg({ progressive: true }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'JPEG progressive 4:4:4 196 MP',
    make: hostile('jpeg-progressive-444-196mp'),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG grey 200 MP, 25 scans (MAX_JPEG_SCAN_BLOCKS)',
    make: hostile('jpeg-scan-blocks-at-limit-grey'),
    decoders: ['libjpeg', 'sharp'],
  },
  {
    name: 'JPEG progressive 4:4:4 quality 100, 24 MP (a large file)',
    make: () =>
      photo(6000, 4000).jpeg({ quality: 100, progressive: true, chromaSubsampling: '4:4:4' }).toBuffer(),
    decoders: ['libjpeg', 'sharp'],
  },
  { name: 'JPEG 49.8 MB of APP1 Exif', make: hostile('jpeg-app1-exif-50mb'), decoders: ['libjpeg', 'sharp'] },
  { name: 'JPEG 49.8 MB of APP1 XMP', make: hostile('jpeg-app1-xmp-50mb'), decoders: ['libjpeg', 'sharp'] },
  {
    name: 'JPEG 49.8 MB of APP2 ICC + APP13',
    make: hostile('jpeg-app2-icc-50mb'),
    decoders: ['libjpeg', 'sharp'],
  },
  { name: 'JPEG 49.8 MB of APP13', make: hostile('jpeg-app13-50mb'), decoders: ['libjpeg', 'sharp'] },
  { name: 'JPEG 49.8 MB of COM', make: hostile('jpeg-com-50mb'), decoders: ['sharp'] },
  {
    name: 'PNG RGB 8-bit 16 MP',
    make: () => photo(4096, 4096).png({ compressionLevel: 1 }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'PNG RGBA 16-bit 8 MP',
    make: () => photo(4096, 2048, 4).toColourspace('rgb16').png({ compressionLevel: 1 }).toBuffer(),
    decoders: ['sharp'],
  },
  { name: 'PNG 31 MB tEXt', make: hostile('png-text-31mb'), decoders: ['sharp'] },
  { name: 'PNG 31 MB zTXt', make: hostile('png-ztxt-31mb'), decoders: ['sharp'] },
  { name: 'PNG 31 MB iTXt', make: hostile('png-itxt-31mb'), decoders: ['sharp'] },
  { name: 'PNG 31 MB eXIf', make: hostile('png-exif-31mb'), decoders: ['sharp'] },
  { name: 'PNG 31 MB iCCP', make: hostile('png-iccp-31mb'), decoders: ['sharp'] },
  {
    name: 'TIFF RGB 8-bit deflate 16 MP',
    make: () => photo(4096, 4096).tiff({ compression: 'deflate' }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'TIFF RGB JPEG-compressed 16 MP',
    make: () => photo(4096, 4096).tiff().toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'TIFF RGBA 16-bit 8 MP',
    make: () => photo(4096, 2048, 4).toColourspace('rgb16').tiff({ compression: 'deflate' }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'TIFF RGBA float 4 MP',
    make: async () => {
      const rgba = await photo(2048, 2048, 4).raw().toBuffer();
      const float = Float32Array.from(rgba, (v) => v / 255);
      return sharp(float, { raw: { width: 2048, height: 2048, channels: 4 } })
        .toColourspace('scrgb')
        .tiff({ compression: 'deflate' })
        .toBuffer();
    },
    decoders: ['sharp'],
  },
  {
    name: 'GIF 4 MP',
    make: () => photo(2048, 2048).gif({ effort: 1, colours: 16, dither: 0 }).toBuffer(),
    decoders: ['sharp'],
  },
  { name: 'TIFF of 65,535 pages', make: hostile('tiff-65535-pages'), decoders: ['sharp'] },
  { name: 'GIF of 3,000,000 frames', make: hostile('gif-3m-frames'), decoders: ['sharp'] },
  {
    name: 'WebP lossy 9 MP',
    make: () => photo(3000, 3000).webp({ effort: 0 }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'WebP lossy 36 MP (the largest allowed)',
    make: () => photo(8192, 4394).webp({ effort: 0 }).toBuffer(),
    decoders: ['sharp'],
  },
  {
    name: 'WebP lossless RGBA 4 MP',
    make: () => photo(2048, 2048, 4).webp({ lossless: true, effort: 0 }).toBuffer(),
    decoders: ['sharp'],
  },
  { name: 'BMP 24-bit 16 MP', make: async () => bmp(4096, 4096, 24), decoders: ['sharp'] },
  { name: 'BMP 32-bit with alpha 8 MP', make: async () => bmp(4096, 2048, 32), decoders: ['sharp'] },
];

const rows: string[] = [];

beforeAll(() => {
  mkdirSync(DIR, { recursive: true });
});

afterAll(() => {
  rmSync(DIR, { recursive: true, force: true });
  const cpu = 'CPU: see /proc/cpuinfo';
  process.stdout.write(
    `\n| image | decoder | estimate MiB | peak MiB | peak / estimate | CPU ms |\n| --- | --- | --- | --- | --- | --- |\n${rows.join('\n')}\n(${cpu})\n`,
  );
});

describe('decode-memory estimate vs the measured peak', () => {
  for (const [index, c] of CASES.entries()) {
    for (const decoder of c.decoders) {
      const skip = decoder === 'libjpeg' ? libjpegUnavailable() : undefined;
      it.skipIf(skip !== undefined)(
        `${c.name}, ${decoder}: peak <= estimate`,
        { timeout: 300_000 },
        async () => {
          const path = join(DIR, `case-${index}`);
          writeFileSync(path, await c.make());
          const m = await measure(path, decoder);
          rows.push(
            `| ${c.name} | ${m.decoder}${m.declined ? ` (declined: ${m.declined})` : ''} | ${(m.estimate / MiB).toFixed(1)} | ${(m.peak / MiB).toFixed(1)} | ${(m.peak / m.estimate).toFixed(2)} | ${m.cpuMs} |`,
          );
          expect(m.peak).toBeLessThanOrEqual(m.estimate);
        },
      );
    }
  }
});
