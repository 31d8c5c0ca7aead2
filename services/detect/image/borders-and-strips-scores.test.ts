// Borders and strips a person sees through (frame-layout.ts), with the real models, built from corpus
// pictures: each scores within 0.2 of the picture alone with mobilenet_v2, open_nsfw and their
// ensemble, as the decoder processes lay frames out (MAX_TILES at its default). Beside each, the
// squash nsfwjs does (the whole frame) is scored too, and for mobilenet_v2 on the picture the issue
// measured (input.below.composite.premultiplied.png, 0.787 alone) it must lose more than 0.2 on every
// border but the plain white one: the cases are ones that hide a picture, not ones any layout passes.

import { readFileSync } from 'node:fs';
import sharp, { type Sharp } from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { summarize } from '../model/classifier.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from '../scoring/image-scorer.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

const MODELS: ModelChoice[] = ['mobilenet_v2', 'open_nsfw', 'mobilenet_v2+open_nsfw'];
/** The corpus's highest-scoring pictures for mobilenet_v2 (an 80 × 80 drawing, two photos). */
const PICTURES = ['input.below.composite.premultiplied.png', 'testimgl.jpg', 'low-contrast.jpg'];
const WITHIN = 0.2;

const png = (s: Sharp): Promise<Buffer> => s.png().toBuffer();

/** The borders of issue 45 around `picture` (lossless PNG), by name. */
async function borders(picture: Buffer): Promise<Record<string, Buffer>> {
  const { width = 0, height = 0 } = await sharp(picture).metadata();
  const [dx, dy] = [Math.round(width * 0.2), Math.round(height * 0.2)];
  const white = { r: 255, g: 255, b: 255 };
  const whiteBorder = await png(
    sharp(picture).extend({ left: dx, right: dx, top: dy, bottom: dy, background: white }),
  );
  const noisyGrey = await (async () => {
    const [w, h] = [width + 2 * dx, height + 2 * dy];
    const raw = Buffer.alloc(w * h * 3);
    let seed = 5;
    for (let i = 0; i < raw.length; i++) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      raw[i] = 215 + ((seed >> 8) % 25) - 12;
    }
    return png(
      sharp(raw, { raw: { width: w, height: h, channels: 3 } }).composite([
        { input: picture, left: dx, top: dy },
      ]),
    );
  })();
  return {
    'white 20 %': whiteBorder,
    'white top/left, black bottom/right': await png(
      sharp(await png(sharp(picture).extend({ left: dx, top: dy, background: white }))).extend({
        right: dx,
        bottom: dy,
        background: { r: 0, g: 0, b: 0 },
      }),
    ),
    'white 20 % and a 1-px black frame line': await png(
      sharp(whiteBorder).extend({ left: 1, right: 1, top: 1, bottom: 1, background: { r: 0, g: 0, b: 0 } }),
    ),
    'light grey 20 % with ±12 noise': noisyGrey,
    'centred in a 3× white canvas': await png(
      sharp(picture).extend({ left: width, right: width, top: height, bottom: height, background: white }),
    ),
  };
}

/** `picture` scaled to 400 px on its long edge, pasted in a white strip of `w` × `h` at (x, y). */
async function strip(
  picture400: Buffer,
  w: number,
  h: number,
  at: { left: number; top: number },
  format: 'png' | 'jpeg',
): Promise<Buffer> {
  const canvas = sharp({ create: { width: w, height: h, channels: 3, background: '#ffffff' } }).composite([
    { input: picture400, ...at },
  ]);
  return format === 'png' ? canvas.png().toBuffer() : canvas.jpeg({ quality: 92 }).toBuffer();
}

describe.each(MODELS)('borders and strips with %s', (model) => {
  let laidOut: InProcessScorer;
  let squash: InProcessScorer;
  beforeAll(async () => {
    laidOut = new InProcessScorer(
      await createOnnxClassifier({ model }),
      undefined,
      'sharp',
      SETTINGS.MAX_TILES.default,
    );
    squash = new InProcessScorer(await createOnnxClassifier({ model }), undefined, 'sharp');
  }, 120_000);
  afterAll(async () => {
    await Promise.all([laidOut?.close(), squash?.close()]);
  });

  const nsfw = async (scorer: InProcessScorer, bytes: Buffer): Promise<number> =>
    summarize(
      (await scorer.score(new Uint8Array(bytes), probeHeader(bytes, await sniffFormat(bytes)))).scores,
      scorer.model,
    ).nsfw;

  it.each(PICTURES)(
    'scores %s within 0.2 of itself behind every border',
    async (name) => {
      const picture = await png(sharp(readFileSync(fixture(name))).flatten({ background: '#ffffff' }));
      const own = await nsfw(laidOut, picture);
      const lines: string[] = [];
      for (const [border, bytes] of Object.entries(await borders(picture))) {
        const [seen, squashed] = [await nsfw(laidOut, bytes), await nsfw(squash, bytes)];
        lines.push(`${border}: ${seen.toFixed(4)} (squashed ${squashed.toFixed(4)})`);
        expect(Math.abs(seen - own), `${model}, ${name}, ${border}`).toBeLessThan(WITHIN);
        if (model === 'mobilenet_v2' && name === PICTURES[0] && border !== 'white 20 %') {
          expect(Math.abs(squashed - own), `${border}: the squash hides it`).toBeGreaterThan(WITHIN);
        }
      }
      console.log(`${model}, ${name} alone ${own.toFixed(4)}: ${lines.join('; ')}`);
    },
    120_000,
  );

  it('scores a 400-px picture anywhere in the longest strips within 0.2 of itself', async () => {
    const picture400 = await png(
      sharp(readFileSync(fixture(PICTURES[0] as string)))
        .flatten({ background: '#ffffff' })
        .resize(400, 400, { fit: 'inside' }),
    );
    const { width = 0, height = 0 } = await sharp(picture400).metadata();
    const own = await nsfw(laidOut, picture400);
    const cases: Array<[string, number, number, { left: number; top: number }, 'png' | 'jpeg']> = [
      ['30000 × 400 JPEG, x 11,300', 30_000, 400, { left: 11_300, top: 0 }, 'jpeg'],
      ['30000 × 400 JPEG, at the end', 30_000, 400, { left: 30_000 - width, top: 400 - height }, 'jpeg'],
      ['20000 × 400 JPEG, x 11,300', 20_000, 400, { left: 11_300, top: 0 }, 'jpeg'],
      ['400 × 20000 JPEG, y 11,300', 400, 20_000, { left: 0, top: 11_300 }, 'jpeg'],
      ['8192 × 400 PNG, x 4,001', 8192, 400, { left: 4_001, top: 0 }, 'png'],
      ['400 × 8192 PNG, y 77', 400, 8192, { left: 0, top: 77 }, 'png'],
    ];
    const lines: string[] = [];
    for (const [label, w, h, at, format] of cases) {
      const bytes = await strip(picture400, w, h, at, format);
      const [seen, squashed] = [await nsfw(laidOut, bytes), await nsfw(squash, bytes)];
      lines.push(`${label}: ${seen.toFixed(4)} (squashed ${squashed.toFixed(4)})`);
      expect(Math.abs(seen - own), `${model}, ${label}`).toBeLessThan(WITHIN);
      if (model === 'mobilenet_v2')
        expect(Math.abs(squashed - own), `${label}: the squash hides it`).toBeGreaterThan(WITHIN);
    }
    console.log(`${model}, 400-px picture alone ${own.toFixed(4)}: ${lines.join('; ')}`);
  }, 300_000);
});
