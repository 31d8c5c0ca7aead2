// An ensemble's score is its definition over its members' (model-catalogue.ts, ModelChoice): the mean of
// their scores.nsfw (and scores.sfw), each member scoring the image through its own preprocessing, as
// it does when it runs alone. Real models on corpus images: a JPEG (which mobilenet_v2 alone decodes
// through the libjpeg fast path), a PNG with alpha, and an EXIF-rotated JPEG.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelChoice, ModelName } from '../../../lib/common/model-catalogue.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { probeHeader } from '../image/probe.ts';
import { sniffFormat } from '../image/sniff.ts';
import { InProcessScorer } from '../scoring/image-scorer.ts';
import { classesOf, summarize } from './classifier.ts';
import { EnsembleClassifier } from './ensemble-classifier.ts';
import { createOnnxClassifier } from './onnx-classifier.ts';

const IMAGES = ['flowers.jpeg', 'blackbug.png', 'Landscape_6.jpg'];
const ENSEMBLES: Array<[ModelChoice, ModelName[]]> = [
  ['mobilenet_v2+open_nsfw', ['mobilenet_v2', 'open_nsfw']],
  ['open_nsfw+mobilenet_v2+inception_v3', ['open_nsfw', 'mobilenet_v2', 'inception_v3']],
];

async function scoresWith(scorer: InProcessScorer, name: string) {
  const bytes = readFileSync(fixture(name));
  return (await scorer.score(new Uint8Array(bytes), probeHeader(bytes, await sniffFormat(bytes)))).scores;
}

async function scoreWith(scorer: InProcessScorer, name: string) {
  return summarize(await scoresWith(scorer, name), scorer.model);
}

describe('EnsembleClassifier', () => {
  const alone = new Map<ModelName, InProcessScorer>();
  beforeAll(async () => {
    for (const model of ['mobilenet_v2', 'inception_v3', 'open_nsfw'] as const) {
      alone.set(model, new InProcessScorer(await createOnnxClassifier({ model })));
    }
  }, 120_000);
  afterAll(async () => {
    await Promise.all([...alone.values()].map((s) => s.close()));
  });

  for (const [choice, members] of ENSEMBLES) {
    it(`${choice}: scores.nsfw and scores.sfw are the means of the members' own`, async () => {
      const ensemble = new InProcessScorer(await createOnnxClassifier({ model: choice }));
      try {
        expect(ensemble.model).toBe(choice);
        for (const name of IMAGES) {
          const own = await Promise.all(members.map((m) => scoreWith(alone.get(m) as InProcessScorer, name)));
          const mean = (k: 'nsfw' | 'sfw') => own.reduce((sum, s) => sum + s[k], 0) / own.length;
          const got = await scoreWith(ensemble, name);
          console.log(
            `${choice}, ${name}: ${members.map((m, i) => `${m} ${own[i]?.nsfw.toFixed(6)}`).join(', ')} → ${got.nsfw.toFixed(6)}`,
          );
          // The same pixels reach each member as when it runs alone (the libjpeg fast path is
          // bit-identical to sharp's decode and the resize): only the summation order may differ.
          expect(got.nsfw, name).toBeCloseTo(mean('nsfw'), 12);
          expect(got.sfw, name).toBeCloseTo(mean('sfw'), 12);
          // data.classes: each member's own classes, by its name, as it gives them alone.
          const classes = classesOf(await scoresWith(ensemble, name), choice) as Record<
            string,
            Record<string, number>
          >;
          expect(Object.keys(classes)).toEqual(members);
          for (const [i, m] of members.entries()) {
            expect(summarize(classes[m] as never, m).nsfw, `${name} ${m}`).toBeCloseTo(
              own[i]?.nsfw as number,
              12,
            );
          }
          expect(Object.keys(classes.open_nsfw ?? {}).sort()).toEqual(['nsfw', 'sfw']);
          expect(Object.keys(classes.mobilenet_v2 ?? {}).sort()).toEqual([
            'drawing',
            'hentai',
            'neutral',
            'porn',
            'sexy',
          ]);
        }
      } finally {
        await ensemble.close();
      }
    }, 120_000);
  }

  it("refuses an input that is not its members' inputs, and fewer than two members", async () => {
    const ensemble = await createOnnxClassifier({ model: 'mobilenet_v2+open_nsfw' });
    try {
      await expect(ensemble.classify(new Float32Array(224 * 224 * 3))).rejects.toThrow(
        /mobilenet_v2\+open_nsfw: expected 301056 floats \(the members' inputs\), got 150528/,
      );
    } finally {
      await ensemble.close();
    }
    expect(() => new EnsembleClassifier('mobilenet_v2', [])).toThrow(/at least two members/);
  });
});
