// The cost of a JPEG is bounded from its markers, before any decoding (probe.ts): more scans than any
// encoder writes, scans that together walk too many blocks, or a component count no encoder writes is
// refused 4005 in milliseconds, whatever the file's size. What real encoders write passes.

import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import {
  hostileImage,
  manyScanScript,
  type ScanSpec,
  simpleScript,
  tiffPages,
  writeProgressiveJpeg,
} from '../../../test/support/hostile-images.ts';
import { toModelInput } from './decode.ts';
import { MAX_JPEG_SCAN_BLOCKS, MAX_JPEG_SCANS, MAX_WEBP_FRAMES } from './image-cost.ts';
import { probeHeader } from './probe.ts';
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
