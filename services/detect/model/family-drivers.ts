// What each model family does, as one record per family: how its input is made from a decoded frame,
// what it may be resized from, which classifier runs it and how its own output becomes scores.nsfw,
// scores.sfw and data.classes. Keyed by ModelFamily: a family added to MODEL_FAMILIES without its driver
// (and its FamilyOutputs entry) does not compile. The models themselves are rows of
// lib/common/model-catalogue.ts. The classifiers are imported on demand: the decoder processes make
// inputs with these drivers and never load onnxruntime.

import {
  MODELS,
  type ModelFamily,
  type ModelName,
  type ModelOfFamily,
} from '../../../lib/common/model-catalogue.ts';
import { resizeToTensor } from '../image/nsfwjs-input.ts';
import { OPEN_NSFW_RESIZE, openNsfwInput } from '../image/open-nsfw-input.ts';
import type { Classifier, ClassScores, NsfwProbability } from './classifier.ts';
import type { OnnxClassifierOptions } from './onnx-classifier.ts';

/** Each family's own output: what its classifier returns and data.classes shows. */
export interface FamilyOutputs {
  nsfwjs: ClassScores;
  open_nsfw: NsfwProbability;
}

export interface FamilyDriver<F extends ModelFamily> {
  /** A model's input, NHWC float32 [1, S, S, 3], from a decoded frame (upright 8-bit RGB). */
  input(
    rgb: Uint8Array,
    width: number,
    height: number,
    model: ModelOfFamily<F>,
  ): Float32Array | Promise<Float32Array>;
  /** The edge its preprocessing first resizes a frame to: a JPEG's shrink-on-load must not go below it. */
  resizeTarget(model: ModelOfFamily<F>): number;
  /**
   * Whether the libjpeg fast path (libjpeg/jpeg-tensor.c), which makes nsfwjs's resize as it decodes,
   * makes this family's input; a family it does not is decoded by sharp.
   */
  jpegFastPath: boolean;
  classifier(opts: OnnxClassifierOptions<ModelOfFamily<F>>): Promise<Classifier>;
  /** scores.nsfw and scores.sfw of the spec, from its own output. */
  summarize(scores: FamilyOutputs[F]): NsfwProbability;
  /** data.classes: its own classes, copied by name. */
  classes(scores: FamilyOutputs[F]): FamilyOutputs[F];
  /** What each of its classes means (the OpenAPI document's data.classes), and how scores.nsfw is made. */
  describe: { classes: { readonly [C in keyof FamilyOutputs[F]]: string }; nsfw: string };
}

export const FAMILY_DRIVERS: { readonly [F in ModelFamily]: FamilyDriver<F> } = {
  nsfwjs: {
    input: (rgb, width, height, model) => resizeToTensor(rgb, width, height, MODELS[model].inputSize),
    resizeTarget: (model) => MODELS[model].inputSize,
    jpegFastPath: true,
    classifier: async (opts) => (await import('./onnx-classifier.ts')).OnnxClassifier.create(opts),
    summarize: (s) => ({ nsfw: s.porn + s.hentai + s.sexy, sfw: s.drawing + s.neutral }),
    classes: ({ drawing, hentai, neutral, porn, sexy }) => ({ drawing, hentai, neutral, porn, sexy }),
    describe: {
      classes: {
        drawing: 'safe drawing or illustration.',
        hentai: 'pornographic drawing.',
        neutral: 'safe photograph.',
        porn: 'pornographic photograph.',
        sexy: 'exposing, not pornographic.',
      },
      nsfw: 'porn + hentai + sexy',
    },
  },
  open_nsfw: {
    input: (rgb, width, height) => openNsfwInput(rgb, width, height),
    resizeTarget: () => OPEN_NSFW_RESIZE,
    jpegFastPath: false,
    classifier: async (opts) => (await import('./open-nsfw-classifier.ts')).OpenNsfwClassifier.create(opts),
    summarize: ({ nsfw, sfw }) => ({ nsfw, sfw }),
    classes: ({ nsfw, sfw }) => ({ nsfw, sfw }),
    describe: {
      classes: { nsfw: "the model's NSFW probability.", sfw: "its complement (the model's other class)." },
      nsfw: 'nsfw',
    },
  },
};

/**
 * A model's driver, typed for any model: the record above ties each family's model names and outputs to
 * its own functions, which a caller holding a ModelName (not a family) cannot name statically.
 */
export function driverOf(model: ModelName): FamilyDriver<ModelFamily> {
  return FAMILY_DRIVERS[MODELS[model].family] as unknown as FamilyDriver<ModelFamily>;
}

/**
 * Whether the libjpeg fast path makes the input of these models: one model (or none: nsfwjs's input at
 * a given size) whose family takes it. An ensemble's members are made from one decode by sharp.
 */
export function jpegFastPathServes(members: readonly ModelName[]): boolean {
  return members.length <= 1 && members.every((m) => driverOf(m).jpegFastPath);
}
