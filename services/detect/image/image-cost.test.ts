// The cost of a JPEG is bounded from its markers, before any decoding (probe.ts): more scans than any
// encoder writes, scans that together walk too many blocks, or a component count no encoder writes is
// refused 4005 in milliseconds, whatever the file's size. What real encoders write passes.

import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import {
  hostileImage,
  manyScanScript,
  pngChunk,
  pngWithChunks,
  type ScanSpec,
  simpleScript,
  tiffPages,
  writeProgressiveJpeg,
} from '../../../test/support/hostile-images.ts';
import { toModelInput } from './decode.ts';
import { decodeMemoryBytes } from './decode-memory.ts';
import {
  type CostFacts,
  imageCostHeader,
  MAX_JPEG_SCAN_BLOCKS,
  MAX_JPEG_SCANS,
  MAX_PNG_CHUNKS,
  MAX_WEBP_FRAMES,
  predictedCpuMs,
} from './image-cost.ts';
import { costFacts, probeHeader, walkHeader } from './probe.ts';
import { jpegStructure } from './probe-jpeg.ts';

function refusal(bytes: Buffer): ApiError {
  try {
    probeHeader(bytes, 'jpeg');
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('probeHeader accepted the image');
}

describe('JPEG scans: counted from the markers', () => {
  it('counts every scan and the blocks each walks, as libjpeg does', async () => {
    const photo = sharp({ create: { width: 640, height: 480, channels: 3, background: '#803020' } });
    const baseline = jpegStructure(await photo.clone().jpeg().toBuffer());
    expect(baseline.scans).toBe(1);
    // libjpeg's progression: 10 scans; 4:2:0 MCUs of 16x16 (40 x 30): 4800 luma blocks, 1200 each chroma.
    const progressive = jpegStructure(await photo.clone().jpeg({ progressive: true }).toBuffer());
    expect(progressive.componentBlocks).toEqual([4800, 1200, 1200]);
    expect(progressive.scans).toBe(10);
    // DC scans walk all three components, the others one: 2 × 7200 + 3 luma, 4 chroma scans.
    expect(progressive.scanBlocks).toBe(2 * 7200 + 4 * 4800 + 4 * 1200);
    const grey = jpegStructure(
      writeProgressiveJpeg({ width: 64, height: 64, components: 1, scans: manyScanScript(1) }),
    );
    expect(grey.scans).toBe(883);
    expect(grey.scanBlocks).toBe(883 * 64);
  });
});

describe('JPEG coefficients: complete or not, from the scan headers', () => {
  it('complete: one sequential scan, libjpeg and mozjpeg progressions, every refinement sent', async () => {
    const photo = sharp({ create: { width: 64, height: 48, channels: 3, background: '#803020' } });
    for (const options of [{}, { progressive: true }, { mozjpeg: true }])
      expect(jpegStructure(await photo.clone().jpeg(options).toBuffer()).coefficientsComplete).toBe(true);
    expect(jpegStructure(await hostileImage('jpeg-many-scans-grey-64')).coefficientsComplete).toBe(true);
  });

  it('incomplete: DC only, AC without its last refinement, a component never sent', async () => {
    for (const name of ['jpeg-incomplete-dc-only', 'jpeg-incomplete-ac-unrefined'] as const)
      expect(jpegStructure(await hostileImage(name)).coefficientsComplete).toBe(false);
    const lumaOnly: ScanSpec[] = [
      { components: [0, 1, 2], ss: 0, se: 0, ah: 0, al: 0 },
      { components: [0], ss: 1, se: 63, ah: 0, al: 0 },
    ];
    expect(
      jpegStructure(writeProgressiveJpeg({ width: 16, height: 16, components: 3, scans: lumaOnly }))
        .coefficientsComplete,
    ).toBe(false);
  });

  it('toModelInput does not try the fast path on them: sharp decodes, and says why', async () => {
    const bytes = await hostileImage('jpeg-incomplete-ac-unrefined');
    const input = await toModelInput(bytes, probeHeader(bytes, 'jpeg'), 224, { jpegDecoder: 'libjpeg' });
    expect({ decoder: input.decoder, declined: input.declined }).toEqual({
      decoder: 'sharp',
      declined: 'progressive coefficients incomplete',
    });
  });
});

describe('JPEG cost limits (4005, before decoding)', () => {
  it.each([
    ['jpeg-many-scans-grey-14142', 883],
    ['jpeg-many-scans-colour-3300', 2647],
    ['jpeg-many-scans-grey-64', 883],
    ['jpeg-many-scans-colour-48', 2647],
  ] as const)('refuses %s: %d scans, over MAX_JPEG_SCANS', async (name, scans) => {
    const bytes = await hostileImage(name);
    const started = performance.now();
    const err = refusal(bytes);
    expect({ status: err.status, code: err.code }).toEqual({ status: 400, code: 4005 });
    expect(err.message).toBe(
      `Undecodable JPEG image: ${scans} scans, over the limit of ${MAX_JPEG_SCANS} (no encoder writes more; each scan is a pass over the image)`,
    );
    // A header walk, not a decode (generous: the machine is shared).
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('refuses fewer scans that walk too many blocks together (a 200 MP grey image, 50 scans)', () => {
    const scans: ScanSpec[] = manyScanScript(1).slice(0, 50);
    const bytes = writeProgressiveJpeg({ width: 14142, height: 14142, components: 1, scans });
    const blocks = Math.ceil(14142 / 8) ** 2 * 50;
    expect(blocks).toBeGreaterThan(MAX_JPEG_SCAN_BLOCKS);
    const err = refusal(bytes);
    expect(err.code).toBe(4005);
    expect(err.message).toBe(
      `Undecodable JPEG image: its 50 scans walk ${blocks} blocks, over the limit of ${MAX_JPEG_SCAN_BLOCKS} (too costly to decode)`,
    );
  });

  it('refuses a JPEG of 2 or 5 components (no encoder writes them; each costs memory)', () => {
    for (const components of [2, 5]) {
      const bytes = writeProgressiveJpeg({
        width: 64,
        height: 64,
        components,
        scans: [{ components: [0], ss: 0, se: 0, ah: 0, al: 0 }],
      });
      const err = refusal(bytes);
      expect(err.code).toBe(4005);
      expect(err.message).toBe(`Undecodable JPEG image: ${components} components (1, 3 or 4 are decoded)`);
    }
  });

  it('takes what encoders write: libjpeg and mozjpeg progressions, CMYK, the largest allowed images', async () => {
    const photo = sharp({ create: { width: 300, height: 200, channels: 3, background: '#208040' } });
    for (const options of [
      { progressive: true },
      { progressive: true, chromaSubsampling: '4:4:4' as const },
      { mozjpeg: true },
      { progressive: true, optimiseScans: true },
    ]) {
      const bytes = await photo.clone().jpeg(options).toBuffer();
      expect(probeHeader(bytes, 'jpeg')).toMatchObject({ width: 300, height: 200 });
    }
    const cmyk = await photo.clone().toColourspace('cmyk').jpeg({ progressive: true }).toBuffer();
    expect(jpegStructure(cmyk).components).toHaveLength(4);
    expect(probeHeader(cmyk, 'jpeg')).toMatchObject({ width: 300, height: 200 });
    expect(probeHeader(await hostileImage('jpeg-progressive-444-196mp'), 'jpeg')).toMatchObject({
      width: 14000,
      height: 14000,
    });
    expect(probeHeader(await hostileImage('jpeg-progressive-grey-30000x6666'), 'jpeg')).toMatchObject({
      width: 30000,
    });
    // libjpeg's own progression for 4 components at 200 MP (18 scans, 24 component passes) fits too.
    const cmykScans: ScanSpec[] = [
      { components: [0, 1, 2, 3], ss: 0, se: 0, ah: 0, al: 1 },
      ...[0, 1, 2, 3].flatMap((c): ScanSpec[] => [
        { components: [c], ss: 1, se: 5, ah: 0, al: 2 },
        { components: [c], ss: 6, se: 63, ah: 0, al: 2 },
        { components: [c], ss: 1, se: 63, ah: 2, al: 1 },
        { components: [c], ss: 1, se: 63, ah: 1, al: 0 },
      ]),
      { components: [0, 1, 2, 3], ss: 0, se: 0, ah: 1, al: 0 },
    ];
    const big = writeProgressiveJpeg({ width: 14142, height: 14142, components: 4, scans: cmykScans });
    expect(jpegStructure(big).scans).toBe(18);
    expect(probeHeader(big, 'jpeg')).toMatchObject({ width: 14142 });
    expect(simpleScript(3)).toHaveLength(10);
    expect(simpleScript(1)).toHaveLength(6);
  });
});

describe('animated WebP frames (4005 past MAX_WEBP_FRAMES)', () => {
  it('refuses 20,000 frames before decoding; takes the limit', async () => {
    const bytes = await hostileImage('webp-20000-frames');
    let err: unknown;
    try {
      probeHeader(bytes, 'webp');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).code).toBe(4005);
    expect((err as ApiError).message).toBe(
      `Undecodable WebP image: 20000 frames, over the limit of ${MAX_WEBP_FRAMES} (the decoder's cost grows with the square of the frame count)`,
    );
    const riff = 12;
    // The first MAX_WEBP_FRAMES frames of the same file (each ANMF chunk the same size): taken.
    const first = bytes.indexOf('ANMF');
    const frameBytes = bytes.indexOf('ANMF', first + 4) - first;
    const kept = Buffer.from(bytes.subarray(0, first + MAX_WEBP_FRAMES * frameBytes));
    kept.writeUInt32LE(kept.length - riff + 4, 4);
    expect(probeHeader(kept, 'webp').frames).toBe(MAX_WEBP_FRAMES);
  });
});

describe('TIFF pages (4005 past 65,535)', () => {
  it('counts 65,535 pages; refuses one more before decoding', () => {
    expect(probeHeader(tiffPages(65_535), 'tiff').frames).toBe(65_535);
    expect(() => probeHeader(tiffPages(65_536), 'tiff')).toThrow(
      expect.objectContaining({ code: 4005, message: 'Undecodable TIFF image: more than 65535 pages' }),
    );
  });
});

describe("JPEG scan work: MAX_JPEG_SCAN_BLOCKS (80 M) refuses the former bound's worst cases", () => {
  it.each([
    ['jpeg-scan-blocks-131m-grey', 42, 131_284_608],
    ['jpeg-scan-blocks-strip-30000x4472', 64, 134_160_000],
  ] as const)(
    'refuses %s (%d scans, %d blocks: ~5.7 s of CPU) before decoding',
    async (name, scans, blocks) => {
      const err = refusal(await hostileImage(name));
      expect({ code: err.code, message: err.message }).toEqual({
        code: 4005,
        message: `Undecodable JPEG image: its ${scans} scans walk ${blocks} blocks, over the limit of ${MAX_JPEG_SCAN_BLOCKS} (too costly to decode)`,
      });
    },
  );

  it('takes the most it allows (14142², 25 scans) and the 196 MP progressive 4:4:4 JPEG', async () => {
    for (const name of ['jpeg-scan-blocks-at-limit-grey', 'jpeg-progressive-444-196mp'] as const) {
      const bytes = await hostileImage(name);
      expect(probeHeader(bytes, 'jpeg').format).toBe('jpeg');
      expect(jpegStructure(bytes).scanBlocks).toBeLessThanOrEqual(MAX_JPEG_SCAN_BLOCKS);
    }
  });
});

describe('header walks: bounded, in slices', () => {
  it('refuses a PNG of more chunks than any real file (4.3 M empty ones) with 4005, walked in slices', async () => {
    const bytes = await hostileImage('png-4m-empty-chunks');
    await walkHeader(bytes, 'png');
    expect(() => probeHeader(bytes, 'png')).toThrow(
      expect.objectContaining({
        code: 4005,
        message: `Undecodable PNG image: over ${MAX_PNG_CHUNKS} chunks (no real file has so many)`,
      }),
    );
  });

  it('refuses a JPEG of 12.8 M empty COM segments with 4005', async () => {
    const bytes = await hostileImage('jpeg-12m-com-segments');
    await walkHeader(bytes, 'jpeg');
    expect(() => probeHeader(bytes, 'jpeg')).toThrow(
      expect.objectContaining({
        code: 4005,
        message: 'Undecodable JPEG image: over 8192 marker segments (no real file has so many)',
      }),
    );
  });

  it('takes a PNG at the chunk bound, and books no decode memory for chunks the decoder skips', () => {
    const empty = pngChunk('zzZz', Buffer.alloc(0));
    // IHDR, the chunks, IDAT: MAX_PNG_CHUNKS - 2 unknown chunks keep the walk at the bound.
    const bytes = pngWithChunks(64, 64, Array<Buffer>(MAX_PNG_CHUNKS - 2).fill(empty));
    const probed = probeHeader(bytes, 'png');
    const bare = pngWithChunks(64, 64, []);
    expect(decodeMemoryBytes(bytes, probed)).toBe(decodeMemoryBytes(bare, probeHeader(bare, 'png')));
    const more = pngWithChunks(64, 64, Array<Buffer>(MAX_PNG_CHUNKS).fill(empty));
    expect(() => probeHeader(more, 'png')).toThrow(expect.objectContaining({ code: 4005 }));
  });

  it('lets the event loop turn during a long walk (50 MB of stuffed entropy-coded data)', async () => {
    const base = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#777' } })
      .jpeg()
      .toBuffer();
    const sos = base.lastIndexOf(Buffer.from([0xff, 0xda]));
    const length = base.readUInt16BE(sos + 2);
    const stuffed = Buffer.alloc(50_000_000);
    for (let i = 0; i < stuffed.length; i += 2) stuffed[i] = 0xff;
    const bytes = Buffer.concat([base.subarray(0, sos + 2 + length), stuffed, Buffer.from([0xff, 0xd9])]);
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    await walkHeader(bytes, 'jpeg');
    clearInterval(ticker);
    expect(jpegStructure(bytes).scans).toBe(1);
    // The walk paused at least once a slice (1 MB of data): the timer ran in between.
    expect(turns).toBeGreaterThan(0);
  });
});

describe('predicted cost (CPU ms, from the header)', () => {
  const photo: CostFacts = { format: 'jpeg', width: 1200, height: 900, frames: 1, bytes: 200_000, tiles: 1 };

  it('grows with scan work, pixels, frames, tiles and models', () => {
    const one = predictedCpuMs({ ...photo, scanBlocks: 25_650 }, 'mobilenet_v2');
    expect(one).toBeGreaterThan(10);
    expect(one).toBeLessThan(60);
    const atLimit = predictedCpuMs(
      { ...photo, width: 14142, height: 14142, scanBlocks: MAX_JPEG_SCAN_BLOCKS },
      'mobilenet_v2',
    );
    // The bound's worst case: seconds, well inside the 15 s deadline.
    expect(atLimit).toBeGreaterThan(2_000);
    expect(atLimit).toBeLessThan(10_000);
    const strip = { ...photo, format: 'png' as const, width: 8192, height: 100, bytes: 3_000, tiles: 8 };
    expect(predictedCpuMs(strip, 'mobilenet_v2')).toBeGreaterThan(
      predictedCpuMs({ ...strip, tiles: 1 }, 'mobilenet_v2'),
    );
    expect(predictedCpuMs(strip, 'mobilenet_v2+inception_v3')).toBeGreaterThan(
      predictedCpuMs(strip, 'mobilenet_v2'),
    );
    const webp = { ...photo, format: 'webp' as const, width: 63, height: 63, bytes: 1_000_000 };
    expect(predictedCpuMs({ ...webp, frames: MAX_WEBP_FRAMES }, 'mobilenet_v2')).toBeGreaterThan(1_000);
  });

  it('counts the tiles of a long frame as sent, and states them in X-Image-Cost', async () => {
    const png = await sharp({ create: { width: 8192, height: 100, channels: 3, background: '#777' } })
      .png()
      .toBuffer();
    const facts = costFacts(png, probeHeader(png, 'png'), 8);
    expect(facts.tiles).toBe(8);
    expect(imageCostHeader(facts, 'mobilenet_v2+open_nsfw')).toMatch(
      /^cpu-ms=\d+; tiles=8; frames=1; models=2$/,
    );
  });
});
