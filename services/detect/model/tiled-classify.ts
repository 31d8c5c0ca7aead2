// Scores a model input that may hold several inputs of one image: tiles and boxes of a frame
// (image/frame-layout.ts) and, when several frames are scored (image/frames.ts), those of each frame.
// Each input is one input of the model (or ensemble), classified one after another, and the image
// answers its highest input's scores as a whole — its scores.nsfw, and that same input's scores.sfw
// and classes, so that the answer is one the model gave (sfw stays its own complement, not 1 − nsfw
// of another input).
//
// Several frames: the inputs are followed by a trailer saying which frame each came from
// (withInputFrames), so that the answer can name the frame that decided; the trailer crosses from the
// decoder process to the scoring thread inside the same Float32Array. Without a trailer the length is
// a whole number of inputs; with one it is n·(L + 1) + 2 for n inputs of L floats, which is a whole
// number of inputs only for n = L − 2 (over 150,000 inputs: never made).

import { MODELS, type ModelChoice, modelMembers } from '../../../lib/common/model-catalogue.ts';
import { type Classifier, type ModelScores, summarize } from './classifier.ts';

/** Floats of one input of `model` (an ensemble: its members' inputs together). */
export function inputLength(model: ModelChoice): number {
  return modelMembers(model).reduce((n, m) => n + MODELS[m].inputSize ** 2 * 3, 0);
}

/** `inputs` (n inputs, one after another) with the trailer: each input's frame, then n, then frames scored. */
export function withInputFrames(inputs: Float32Array, inputFrames: readonly number[]): Float32Array {
  const n = inputFrames.length;
  const out = new Float32Array(inputs.length + n + 2);
  out.set(inputs);
  out.set(inputFrames, inputs.length);
  out[inputs.length + n] = n;
  out[inputs.length + n + 1] = new Set(inputFrames).size;
  return out;
}

/** Frames scored of an image, and the one whose input answered (0-based, in the input's order). */
export interface FramesScored {
  scored: number;
  decisive: number;
}

export interface ClassifiedInputs {
  scores: ModelScores;
  /** Set when the input carried several frames (a trailer). */
  frames?: FramesScored;
}

export async function classifyTiles(classifier: Classifier, input: Float32Array): Promise<ClassifiedInputs> {
  const length = inputLength(classifier.name);
  let inputs = input;
  let inputFrames: Float32Array | undefined;
  let framesScored = 1;
  if (input.length % length !== 0) {
    const n = input[input.length - 2] as number;
    if (!Number.isInteger(n) || n < 1 || n * (length + 1) + 2 !== input.length) {
      throw new RangeError(`${classifier.name}: ${input.length} floats are not whole inputs of ${length}`);
    }
    inputs = input.subarray(0, n * length);
    inputFrames = input.subarray(n * length, n * length + n);
    framesScored = input[input.length - 1] as number;
  }
  if (inputs.length <= length) return { scores: await classifier.classify(inputs) };
  let best: ModelScores | undefined;
  let bestAt = 0;
  let bestNsfw = -1;
  for (let offset = 0, k = 0; offset < inputs.length; offset += length, k++) {
    const scores = await classifier.classify(inputs.subarray(offset, offset + length));
    const { nsfw } = summarize(scores, classifier.name);
    if (nsfw > bestNsfw) {
      best = scores;
      bestAt = k;
      bestNsfw = nsfw;
    }
  }
  const scores = best as ModelScores;
  return inputFrames
    ? { scores, frames: { scored: framesScored, decisive: inputFrames[bestAt] as number } }
    : { scores };
}
