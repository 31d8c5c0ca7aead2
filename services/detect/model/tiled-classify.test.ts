// classifyTiles on a fake classifier whose scores are read from its input (fast unit test; the real
// model on tiled frames: image/frame-layout-scores.test.ts): the highest tile answers with its own
// scores, whole; one input is classified as it is.

import { describe, expect, it } from 'vitest';
import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import type { Classifier, ClassScores, ModelScores } from './classifier.ts';
import { classifyTiles, inputLength, withInputFrames } from './tiled-classify.ts';

/** One input of each model: an RGB square of its size, three floats a pixel. */
const INPUT_FLOATS: Partial<Record<ModelChoice, number>> = { mobilenet_v2: 224 * 224 * 3 };

/** Reads porn from the input's first float and drawing from its second; the rest neutral. */
function fake(name: ModelChoice): Classifier & { calls: number } {
  return {
    name,
    inputSize: 224,
    calls: 0,
    async classify(input: Float32Array): Promise<ModelScores> {
      this.calls++;
      expect(input.length).toBe(INPUT_FLOATS[name]);
      const porn = input[0] as number;
      const drawing = input[1] as number;
      return { porn, drawing, hentai: 0, sexy: 0, neutral: 1 - porn - drawing } satisfies ClassScores;
    },
    close: async () => {},
  };
}

function tiles(...firsts: Array<[number, number]>): Float32Array {
  const length = 224 * 224 * 3;
  const out = new Float32Array(firsts.length * length);
  for (const [i, first] of firsts.entries()) out.set(first, i * length);
  return out;
}

describe('classifyTiles', () => {
  it('answers the highest tile, its sfw and classes its own', async () => {
    const c = fake('mobilenet_v2');
    const scores = (await classifyTiles(c, tiles([0.25, 0.5], [0.75, 0], [0.5, 0.25]))).scores as ClassScores;
    expect(c.calls).toBe(3);
    expect(scores).toEqual({ porn: 0.75, drawing: 0, hentai: 0, sexy: 0, neutral: 0.25 });
  });

  it('classifies one input as it is', async () => {
    const c = fake('mobilenet_v2');
    expect(((await classifyTiles(c, tiles([0.125, 0.5]))).scores as ClassScores).porn).toBe(0.125);
    expect(c.calls).toBe(1);
  });

  it('names the frame of the highest input from the trailer, and how many frames were scored', async () => {
    const c = fake('mobilenet_v2');
    // Frame 0 as two inputs, frame 4 as one, frame 9 as one: frame 4's is the highest.
    const input = withInputFrames(tiles([0.25, 0], [0.5, 0], [0.75, 0], [0.125, 0]), [0, 0, 4, 9]);
    const classified = await classifyTiles(c, input);
    expect(c.calls).toBe(4);
    expect((classified.scores as ClassScores).porn).toBe(0.75);
    expect(classified.frames).toEqual({ scored: 3, decisive: 4 });
    expect((await classifyTiles(c, tiles([0.5, 0]))).frames).toBeUndefined();
  });

  it('refuses an input that is not whole tiles', async () => {
    await expect(classifyTiles(fake('mobilenet_v2'), new Float32Array(224 * 224 * 3 + 3))).rejects.toThrow(
      /not whole inputs/,
    );
  });

  it('counts an ensemble input as its members’ inputs together', () => {
    expect(inputLength('mobilenet_v2')).toBe(150_528);
    expect(inputLength('mobilenet_v2+inception_v3')).toBe(224 * 224 * 3 + 299 * 299 * 3);
  });
});
