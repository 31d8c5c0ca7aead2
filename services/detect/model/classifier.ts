// The capability the detect service needs from a model. The ONNX implementation lives beside this
// file; tests may substitute a fake, the composition root chooses.

import type { ModelName } from '../../policy/model-catalogue.ts';

/** nsfwjs's output order. Scores are always read by name, never by position. */
export const CLASS_NAMES = ['drawing', 'hentai', 'neutral', 'porn', 'sexy'] as const;
export type ClassName = (typeof CLASS_NAMES)[number];
export type ClassScores = Record<ClassName, number>;

export interface Classifier {
  readonly name: ModelName;
  /** Edge of the square input, in pixels. */
  readonly inputSize: number;
  /**
   * Scores one image given as an NHWC float tensor [1, size, size, 3], RGB, values in [0, 1],
   * already resized exactly as nsfwjs does (bilinear, alignCorners).
   */
  classify(input: Float32Array): Promise<ClassScores>;
  close(): Promise<void>;
}

/** scores.nsfw and scores.sfw of the spec, from the five classes. */
export function summarize(scores: ClassScores): { nsfw: number; sfw: number } {
  return {
    nsfw: scores.porn + scores.hentai + scores.sexy,
    sfw: scores.drawing + scores.neutral,
  };
}
