// Scores a model input that may hold several tiles of one frame (image/frame-layout.ts): each tile is
// one input of the model (or ensemble) one after another, and the frame answers its highest tile's
// scores as a whole — its scores.nsfw, and that same tile's scores.sfw and classes, so that the answer
// is one the model gave (sfw stays its own complement, not 1 − nsfw of another tile).

import { MODEL_INPUT_SIZE, type ModelChoice, modelMembers } from '../../../lib/policy/model-catalogue.ts';
import { type Classifier, type ModelScores, summarize } from './classifier.ts';

/** Floats of one input of `model` (an ensemble: its members' inputs together). */
export function inputLength(model: ModelChoice): number {
  return modelMembers(model).reduce((n, m) => n + MODEL_INPUT_SIZE[m] * MODEL_INPUT_SIZE[m] * 3, 0);
}

export async function classifyTiles(classifier: Classifier, input: Float32Array): Promise<ModelScores> {
  const length = inputLength(classifier.name);
  if (input.length <= length) return classifier.classify(input);
  if (input.length % length !== 0) {
    throw new RangeError(`${classifier.name}: ${input.length} floats are not whole inputs of ${length}`);
  }
  let best: ModelScores | undefined;
  let bestNsfw = -1;
  for (let offset = 0; offset < input.length; offset += length) {
    const scores = await classifier.classify(input.subarray(offset, offset + length));
    const { nsfw } = summarize(scores);
    if (nsfw > bestNsfw) {
      best = scores;
      bestNsfw = nsfw;
    }
  }
  return best as ModelScores;
}
