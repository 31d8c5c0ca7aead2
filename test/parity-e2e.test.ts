// End-to-end parity: every corpus image that decodes, file bytes → our production unit of work (the
// scorer each worker runs: decode, nsfwjs-exact resize, ONNX) versus nsfwjs's own preprocessing and
// model (tensor3d of the decoded RGB → /255 → resizeBilinear with alignCorners → its model), on the
// tfjs wasm backend. The bound: max |Δ scores.nsfw| ≤ 0.01. The figures are printed.

import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { referenceScoresFromRgb } from '../models/nsfwjs-reference.ts';
import { decodeRgb } from '../services/detect/image/decode.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { summarize } from '../services/detect/model/classifier.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { InProcessScorer } from '../services/detect/scoring/image-scorer.ts';
import { CORPUS, fixture } from './fixtures/corpus.ts';

const decodable = Object.entries(CORPUS)
  .filter(([, outcome]) => 'ok' in outcome)
  .map(([name]) => name);

describe('end-to-end parity with nsfwjs over the corpus', () => {
  const deltas: Array<{ name: string; delta: number; ours: number; reference: number }> = [];
  afterAll(() => {
    if (deltas.length === 0) return;
    const worst = deltas.reduce((a, b) => (b.delta > a.delta ? b : a));
    const mean = deltas.reduce((sum, d) => sum + d.delta, 0) / deltas.length;
    console.log(
      `parity over ${deltas.length} corpus images: max |Δ nsfw| ${worst.delta.toExponential(2)} (${worst.name}), mean ${mean.toExponential(2)}`,
    );
  });

  it('scores within 0.01 of nsfwjs on every image that decodes', async () => {
    const scorer = new InProcessScorer(await createOnnxClassifier({ model: 'mobilenet_v2' }));
    try {
      expect(decodable.length).toBeGreaterThan(80);
      for (const name of decodable) {
        const bytes = readFileSync(fixture(name));
        const probed = probeHeader(bytes, await sniffFormat(bytes));
        const ours = summarize((await scorer.score(bytes, probed)).scores, 'mobilenet_v2').nsfw;
        const rgb = await decodeRgb(bytes, probed);
        const reference = summarize(
          await referenceScoresFromRgb(rgb.rgb, rgb.width, rgb.height, 'mobilenet_v2', 'wasm'),
          'mobilenet_v2',
        ).nsfw;
        deltas.push({ name, delta: Math.abs(ours - reference), ours, reference });
      }
      const failures = deltas.filter((d) => d.delta > 0.01);
      expect(failures).toEqual([]);
    } finally {
      await scorer.close();
    }
  }, 300_000);
});
