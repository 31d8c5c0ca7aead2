// Which path an image's decode takes, from its header: ordinary corpus photos and graphics in the
// scoring worker threads, and every hostile image that passes the header probe in a decoder process.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { HOSTILE_IMAGES, type HostileImageName, hostileImage } from '../../../test/support/hostile-images.ts';
import { probeHeader } from '../image/probe.ts';
import { sniffFormat } from '../image/sniff.ts';
import { decodeFacts, decodeRoute } from './decode-route.ts';

const bounds = { maxPixels: SETTINGS.IN_PROCESS_MAX_PIXELS.default };

async function routeOf(bytes: Uint8Array) {
  const probed = probeHeader(bytes, await sniffFormat(bytes));
  return decodeRoute(decodeFacts(bytes, probed), bounds);
}

describe('decodeRoute', () => {
  it('decodes ordinary photos and graphics of every format in process', async () => {
    const ordinary = [
      '320x240.jpg', // baseline JPEG
      '2569067123_aca715a2ee_o.jpg', // 6 MP photo
      'flowers.jpeg',
      'gradients-rgb8.png',
      'Flag_of_the_Netherlands-16bit.png',
      'alpha-premultiply-2048x1536-paper.png',
      '4.webp',
      'animated-loop-3.webp',
      'animated-loop-3.gif',
      'Crash_test.gif',
      'uncompressed_tiff.tiff',
      'fogra-0-100-100-0.tif',
    ];
    for (const name of ordinary)
      expect(await routeOf(readFileSync(fixture(name))), name).toEqual({
        path: 'in-process',
        reason: 'ordinary',
      });
  });

  it('isolates an animation when several of its frames are scored, not its first frame alone', async () => {
    for (const name of ['animated-loop-3.webp', 'animated-loop-3.gif']) {
      const bytes = readFileSync(fixture(name));
      const facts = decodeFacts(bytes, probeHeader(bytes, await sniffFormat(bytes)));
      expect(decodeRoute(facts, { ...bounds, maxFramesScored: 1 }).path, name).toBe('in-process');
      expect(decodeRoute(facts, { ...bounds, maxFramesScored: 8 }), name).toEqual({
        path: 'isolated',
        reason: `${facts.frames} frames, several of them scored`,
      });
    }
  });

  it('isolates CMYK and metadata-heavy files', async () => {
    const expectations: Array<[string, RegExp]> = [
      ['Channel_digital_image_CMYK_color.jpg', /4 components/],
      ['tifftag-photoshop.tiff', /more than its pixels/],
    ];
    for (const [name, reason] of expectations) {
      const route = await routeOf(readFileSync(fixture(name)));
      expect(route.path, name).toBe('isolated');
      expect(route.reason, name).toMatch(reason);
    }
  });

  it('isolates every hostile image that the header probe lets through', async () => {
    let passed = 0;
    for (const name of Object.keys(HOSTILE_IMAGES) as HostileImageName[]) {
      const bytes = await hostileImage(name);
      const format = await sniffFormat(bytes);
      let probed: ReturnType<typeof probeHeader> | undefined;
      try {
        probed = probeHeader(bytes, format);
      } catch {
        // Refused before any decoding: no path at all.
      }
      const route = probed && decodeRoute(decodeFacts(bytes, probed), bounds);
      if (route) passed += 1;
      expect(route?.path ?? 'refused by the probe', name).not.toBe('in-process');
    }
    expect(passed).toBeGreaterThan(10);
  }, 120_000);

  it('isolates a JPEG by its scans, the blocks they walk, its metadata and incomplete coefficients', () => {
    const photo = {
      format: 'jpeg' as const,
      width: 2000,
      height: 1500,
      frames: 1,
      byteLength: 800_000,
      jpeg: {
        progressive: true,
        scans: 10,
        components: 3,
        scanBlocks: 300_000,
        metadataBytes: 60_000,
        coefficientsComplete: true,
      },
    };
    expect(decodeRoute(photo, bounds).path).toBe('in-process');
    const over = (jpeg: Partial<typeof photo.jpeg>) =>
      decodeRoute({ ...photo, jpeg: { ...photo.jpeg, ...jpeg } }, bounds);
    expect(over({ scans: 13 }).reason).toMatch(/13 scans/);
    expect(over({ scanBlocks: 5_000_000 }).reason).toMatch(/walk 5000000 blocks/);
    expect(over({ metadataBytes: 2_000_000 }).reason).toMatch(/metadata/);
    expect(over({ coefficientsComplete: false }).reason).toMatch(/incomplete/);
    expect(decodeRoute({ ...photo, frames: 300 }, bounds).reason).toMatch(/300 frames/);
    expect(decodeRoute({ ...photo, width: 4032, height: 3024 }, bounds).reason).toMatch(
      /12192768 pixels, over 8388608/,
    );
    expect(decodeRoute(photo, { maxPixels: 0 }).path).toBe('isolated');
  });
});
