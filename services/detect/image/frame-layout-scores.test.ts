// What tiles and margins do to a score (frame-layout.ts), with the real mobilenet_v2 on a corpus photo
// (low-contrast.jpg, scores.nsfw 0.2527: the corpus's highest for a photo). Expectations measured and
// written by hand:
// - padded with 10 % white on each side, nsfwjs's squash scores it 0.0247; trimmed, it is the photo again;
// - inside a white strip of 6 and 10 times its height (the photo at a third of its length, the strip's
//   short edge 1.25 times the photo's long edge), the squash scores it 0.0036 and 0.0026; laid out, the
//   strip's one content run is the photo, trimmed to it, and the strip scores the photo's own score.
//   Every border and strip of issue 45, with three models: borders-and-strips-scores.test.ts.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { summarize } from '../model/classifier.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from '../scoring/image-scorer.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

const PHOTO = 'low-contrast.jpg';
const OWN = 0.2527;

describe('tiles and margins with mobilenet_v2', () => {
  let nsfwjs: InProcessScorer;
  let laidOut: InProcessScorer;
  let photo: Buffer;
  beforeAll(async () => {
    nsfwjs = new InProcessScorer(await createOnnxClassifier({ model: 'mobilenet_v2' }));
    laidOut = new InProcessScorer(
      await createOnnxClassifier({ model: 'mobilenet_v2' }),
      undefined,
      'sharp',
      8,
    );
    // Lossless from here on, so that a trimmed frame holds the photo's very pixels.
    photo = await sharp(readFileSync(fixture(PHOTO)))
      .png()
      .toBuffer();
  }, 120_000);
  afterAll(async () => {
    await Promise.all([nsfwjs?.close(), laidOut?.close()]);
  });

  const nsfw = async (scorer: InProcessScorer, png: Buffer): Promise<number> =>
    summarize(
      (await scorer.score(new Uint8Array(png), probeHeader(png, await sniffFormat(png)))).scores,
      scorer.model,
    ).nsfw;

  it('scores the photo alone the same either way', async () => {
    expect(await nsfw(nsfwjs, photo)).toBeCloseTo(OWN, 4);
    expect(await nsfw(laidOut, photo)).toBeCloseTo(OWN, 4);
  });

  it('scores the photo padded with 10 % white as the photo, where the squash does not', async () => {
    const padded = await sharp(photo)
      .extend({ left: 30, right: 30, top: 25, bottom: 25, background: '#ffffff' })
      .png()
      .toBuffer();
    expect(await nsfw(nsfwjs, padded)).toBeCloseTo(0.0247, 3);
    expect(Math.abs((await nsfw(laidOut, padded)) - OWN)).toBeLessThan(1e-4);
  });

  it('scores a long white strip holding the photo near the photo, where the squash does not', async () => {
    const { width = 0, height = 0 } = await sharp(photo).metadata();
    const short = Math.round(Math.max(width, height) * 1.25);
    for (const [ratio, squashed] of [
      [6, 0.0036],
      [10, 0.0026],
    ] as const) {
      const long = ratio * short;
      const strip = await sharp({
        create: { width: long, height: short, channels: 3, background: '#ffffff' },
      })
        .composite([
          { input: photo, left: Math.floor((long - width) / 3), top: Math.floor((short - height) / 2) },
        ])
        .png()
        .toBuffer();
      expect(await nsfw(nsfwjs, strip), `ratio ${ratio}, squashed`).toBeCloseTo(squashed, 3);
      expect(Math.abs((await nsfw(laidOut, strip)) - OWN), `ratio ${ratio}, tiled`).toBeLessThan(1e-4);
    }
  });
});
