// Frames scored (frames.ts, MAX_FRAMES_SCORED) with the real mobilenet_v2: an animation of eight frames,
// blank but for the fifth (index 5), which is the corpus picture the issue measured
// (input.below.composite.premultiplied.png, 0.787 alone), as GIF, animated WebP, APNG and multi-page
// TIFF. By default (1) only the first frame is scored, as the spec says: blank, allowed. With 8 every
// frame is scored and the fifth decides. Past the bound on decoded frame pixels the image is refused
// (4004) before any pixel is decoded.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isApiError } from '../../../lib/common/errors.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { type AnimatedFormat, animationOf } from '../../../test/support/animations.ts';
import { summarize } from '../model/classifier.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from '../scoring/image-scorer.ts';
import { toModelInput } from './decode.ts';
import { framesToScore, MAX_DECODED_FRAME_PIXELS, MAX_WEBP_FRAMES_SAMPLED, sampledFrames } from './frames.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';
import { DEFAULT_DIMENSION_LIMITS } from './types.ts';

const FORMATS: AnimatedFormat[] = ['gif', 'webp', 'apng', 'tiff'];
const DECISIVE = 5;

describe('sampledFrames', () => {
  it('takes the first frame only by default, and N evenly from the first to the last', () => {
    expect(sampledFrames(10, 1)).toEqual([0]);
    expect(sampledFrames(1, 8)).toEqual([0]);
    expect(sampledFrames(3, 8)).toEqual([0, 1, 2]);
    expect(sampledFrames(100, 4)).toEqual([0, 33, 66, 99]);
  });
});

describe('frames scored with mobilenet_v2', () => {
  let first: InProcessScorer;
  let eight: InProcessScorer;
  let own: number;
  const animations = new Map<AnimatedFormat, Buffer>();
  beforeAll(async () => {
    const tiles = SETTINGS.MAX_TILES.default;
    first = new InProcessScorer(
      await createOnnxClassifier({ model: 'mobilenet_v2' }),
      undefined,
      'sharp',
      tiles,
    );
    eight = new InProcessScorer(
      await createOnnxClassifier({ model: 'mobilenet_v2' }),
      undefined,
      'sharp',
      tiles,
      8,
    );
    const picture = await sharp(readFileSync(fixture('input.below.composite.premultiplied.png')))
      .flatten({ background: '#ffffff' })
      .resize(160, 160)
      .png()
      .toBuffer();
    own = summarize(
      (await first.score(new Uint8Array(picture), probeHeader(picture, 'png'))).scores,
      first.model,
    ).nsfw;
    // Blank frames of different greys: encoders merge identical (or, for GIF, similar) frames.
    const blank = (i: number): Promise<Buffer> => {
      const grey = 255 - 16 * i;
      return sharp({
        create: { width: 160, height: 160, channels: 3, background: { r: grey, g: grey, b: grey } },
      })
        .png()
        .toBuffer();
    };
    const frames = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i === DECISIVE ? picture : blank(i))),
    );
    for (const format of FORMATS) animations.set(format, await animationOf(format, frames));
  }, 120_000);
  afterAll(async () => {
    await Promise.all([first?.close(), eight?.close()]);
  });

  it.each(FORMATS)(
    '%s: the first frame alone by default, the decisive frame with MAX_FRAMES_SCORED=8',
    async (format) => {
      const bytes = animations.get(format) as Buffer;
      const probed = probeHeader(bytes, await sniffFormat(bytes));
      expect(probed.frames).toBe(8);
      const byDefault = await first.score(new Uint8Array(bytes), probed);
      expect(byDefault.frames).toBeUndefined();
      expect(summarize(byDefault.scores, first.model).nsfw).toBeLessThan(0.1);
      const scored = await eight.score(new Uint8Array(bytes), probed);
      expect(scored.frames).toEqual({ scored: 8, decisive: DECISIVE });
      const nsfw = summarize(scored.scores, eight.model).nsfw;
      console.log(
        `${format}: first frame ${summarize(byDefault.scores, first.model).nsfw.toFixed(4)}, 8 frames ${nsfw.toFixed(4)} (frame ${DECISIVE} alone ${own.toFixed(4)})`,
      );
      // GIF's 256-colour palette moves the picture a little; the others are lossless.
      expect(Math.abs(nsfw - own)).toBeLessThan(format === 'gif' ? 0.2 : 1e-3);
    },
    60_000,
  );
});

describe('the cost of frames scored, from the header', () => {
  /** A GIF of `frames` 1 × 1 frames whose logical screen claims `edge` × `edge`. */
  async function claimedGif(frames: number, edge: number): Promise<Buffer> {
    // Each a different colour: encoders merge identical frames.
    const dots = await Promise.all(
      Array.from({ length: frames }, (_, i) =>
        sharp({
          create: {
            width: 1,
            height: 1,
            channels: 3,
            background: { r: (i * 37) % 256, g: (i * 91) % 256, b: i * 4 },
          },
        })
          .png()
          .toBuffer(),
      ),
    );
    const gif = await sharp(dots, { join: { animated: true } })
      .gif()
      .toBuffer();
    gif.writeUInt16LE(edge, 6);
    gif.writeUInt16LE(edge, 8);
    return gif;
  }

  it('refuses frames whose decoding is over the bound (4004) before decoding, and scores the first alone', async () => {
    // 64 frames of 4000 × 4000 (16 MP each, within the limits alone): 8 evenly taken decode 37 frames' worth.
    const gif = await claimedGif(64, 4000);
    const probed = probeHeader(gif, 'gif');
    expect(probed).toMatchObject({ width: 4000, height: 4000, frames: 64 });
    expect(framesToScore(gif, probed, 1, DEFAULT_DIMENSION_LIMITS)).toEqual([0]);
    let refused: unknown;
    try {
      framesToScore(gif, probed, 8, DEFAULT_DIMENSION_LIMITS);
    } catch (err) {
      refused = err;
    }
    expect(isApiError(refused) && refused.code).toBe(4004);
    await expect(toModelInput(gif, probed, 224, { maxFramesScored: 8 })).rejects.toMatchObject({
      code: 4004,
    });
    // Within the bound: 8 frames of 1000 × 1000 decode 8 + 9 + … frames' worth, far under it.
    const small = await claimedGif(8, 1000);
    expect(framesToScore(small, probeHeader(small, 'gif'), 8, DEFAULT_DIMENSION_LIMITS)).toHaveLength(8);
    expect(36 * 1_000_000).toBeLessThan(MAX_DECODED_FRAME_PIXELS);
  });

  it('refuses several frames of a WebP of more than MAX_WEBP_FRAMES_SAMPLED frames, not its first alone', () => {
    const probed = { format: 'webp', width: 10, height: 10, frames: MAX_WEBP_FRAMES_SAMPLED + 1 } as const;
    const none = new Uint8Array(0);
    expect(framesToScore(none, probed, 1, DEFAULT_DIMENSION_LIMITS)).toEqual([0]);
    expect(() => framesToScore(none, probed, 8, DEFAULT_DIMENSION_LIMITS)).toThrow(
      /over the limit of 2048 frames/,
    );
    expect(
      framesToScore(none, { ...probed, frames: MAX_WEBP_FRAMES_SAMPLED }, 8, DEFAULT_DIMENSION_LIMITS),
    ).toHaveLength(8);
  });
});
