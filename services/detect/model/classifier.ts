// The capability the detect service needs from a model. The ONNX implementation lives beside this
// file; tests may substitute a fake, the composition root chooses.

import type { ModelChoice, ModelFamily, ModelName } from '../../../lib/common/model-catalogue.ts';
import { driverOf, type FamilyOutputs } from './family-drivers.ts';

/** nsfwjs's output order. Scores are always read by name, never by position. */
export const CLASS_NAMES = ['drawing', 'hentai', 'neutral', 'porn', 'sexy'] as const;
export type ClassName = (typeof CLASS_NAMES)[number];
/** The nsfwjs family's output: a probability per class. */
export type ClassScores = Record<ClassName, number>;
/** scores.nsfw and scores.sfw of the spec. */
export interface NsfwProbability {
  nsfw: number;
  sfw: number;
}
/**
 * What a classifier returns, by its model's family (family-drivers.ts): nsfwjs's five
 * classes, or open_nsfw's NSFW probability and its complement (its two softmax classes), which has no
 * nsfwjs class (read by name, one is undefined).
 */
export type ModelScores =
  | ClassScores
  | (NsfwProbability & { readonly [C in ClassName]?: never })
  | EnsembleScores;

/** An ensemble's output: the means (scores.nsfw, scores.sfw) and each member's own scores, by its name. */
export type EnsembleScores = NsfwProbability & { readonly [C in ClassName]?: never } & {
  members: Partial<Record<ModelName, ModelScores>>;
};

/**
 * A model family's own class scores (data.classes): nsfwjs's five, or open_nsfw's two (nsfw and sfw);
 * an ensemble's per member, by the member's name.
 */
export type FamilyClasses = FamilyOutputs[ModelFamily];
export type ResultClasses = FamilyClasses | Partial<Record<ModelName, FamilyClasses>>;

export interface Classifier {
  /** The model, or the ensemble (ensemble-classifier.ts). */
  readonly name: ModelChoice;
  /** Edge of the square input, in pixels. */
  readonly inputSize: number;
  /**
   * Scores one image given as an NHWC float tensor [1, size, size, 3] made by its family's
   * preprocessing (toModelInput): for nsfwjs's models RGB in [0, 1], resized exactly as nsfwjs does
   * (bilinear, alignCorners); for open_nsfw BGR minus the Caffe mean (image/open-nsfw-input.ts); for
   * an ensemble its members' inputs one after another.
   */
  classify(input: Float32Array): Promise<ModelScores>;
  close(): Promise<void>;
}

/**
 * scores.nsfw and scores.sfw of the spec, by the family of `model` (its driver's summary); an ensemble's
 * are the members' means it computed.
 */
export function summarize(scores: ModelScores, model: ModelChoice): NsfwProbability {
  if ('members' in scores) return { nsfw: scores.nsfw, sfw: scores.sfw };
  return driverOf(model as ModelName).summarize(scores as FamilyClasses);
}

/** data.classes of a result: the family's own classes, copied by name (an ensemble: per member). */
export function classesOf(scores: ModelScores, model: ModelChoice): ResultClasses {
  if ('members' in scores) {
    const members: Partial<Record<ModelName, FamilyClasses>> = {};
    for (const [name, own] of Object.entries(scores.members) as Array<[ModelName, ModelScores]>) {
      members[name] = classesOf(own, name) as FamilyClasses;
    }
    return members;
  }
  return driverOf(model as ModelName).classes(scores as FamilyClasses);
}
