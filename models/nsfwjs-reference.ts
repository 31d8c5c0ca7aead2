// nsfwjs itself, on @tensorflow/tfjs's pure-JS CPU backend: the reference our ONNX models are
// compared with. Loads the models bundled in the package (no network): nsfwjs.load('MobileNetV2')
// dynamically imports dist/models/<name>/*.min.js, which are CommonJS modules on disk.

import * as tf from '@tensorflow/tfjs';
import * as nsfwjs from 'nsfwjs';
import {
  CLASS_NAMES,
  type ClassName,
  type ClassScores,
  type ModelName,
} from '../services/detect/model/classifier.ts';

const NSFWJS_MODEL: Record<ModelName, 'MobileNetV2' | 'InceptionV3'> = {
  mobilenet_v2: 'MobileNetV2',
  inception_v3: 'InceptionV3',
};

const loaded = new Map<ModelName, Promise<nsfwjs.NSFWJS>>();

/** The reference always runs on the pure-JS CPU backend, even if something else switched it. */
async function useCpu(): Promise<void> {
  if (tf.getBackend() !== 'cpu' && !(await tf.setBackend('cpu')))
    throw new Error('tfjs cpu backend unavailable');
  await tf.ready();
}

let quietDepth = 0;
let saved: Pick<Console, 'info' | 'warn'> = console;

/**
 * Runs f with console.info/warn muted: nsfwjs's "you're using the model" banner, tfjs's
 * "install tfjs-node" hint. Nested and concurrent uses restore the console once, at the end.
 */
export async function quietly<T>(f: () => Promise<T>): Promise<T> {
  if (quietDepth++ === 0) {
    saved = { info: console.info, warn: console.warn };
    console.info = () => {};
    console.warn = () => {};
  }
  try {
    return await f();
  } finally {
    if (--quietDepth === 0) {
      console.info = saved.info;
      console.warn = saved.warn;
    }
  }
}

export function loadReference(model: ModelName): Promise<nsfwjs.NSFWJS> {
  let p = loaded.get(model);
  if (!p) {
    p = quietly(async () => {
      await useCpu();
      return nsfwjs.load(NSFWJS_MODEL[model]);
    });
    loaded.set(model, p);
    p.catch(() => loaded.delete(model));
  }
  return p;
}

function byName(predictions: { className: string; probability: number }[]): ClassScores {
  const scores = {} as ClassScores;
  for (const name of CLASS_NAMES) {
    const p = predictions.find((x) => x.className.toLowerCase() === name);
    if (!p) throw new Error(`nsfwjs returned no ${name} score`);
    scores[name as ClassName] = p.probability;
  }
  return scores;
}

/**
 * nsfwjs's own classify path on decoded RGB pixels (row-major, 3 bytes per pixel): /255, then
 * resizeBilinear to the model size with alignCorners (skipped when already that size), no crop.
 */
export async function referenceScoresFromRgb(
  rgb: Uint8Array,
  width: number,
  height: number,
  model: ModelName,
): Promise<ClassScores> {
  if (rgb.length !== width * height * 3)
    throw new Error(`expected ${width}x${height}x3 bytes, got ${rgb.length}`);
  const net = await loadReference(model);
  await useCpu();
  const img = tf.tensor3d(rgb, [height, width, 3], 'int32');
  try {
    return byName(await net.classify(img, CLASS_NAMES.length));
  } finally {
    img.dispose();
  }
}

/**
 * The model alone on an already preprocessed NHWC tensor [1, S, S, 3] in [0, 1] — what nsfwjs
 * passes to model.predict — for comparisons on arbitrary float inputs.
 */
export async function referenceScoresFromTensor(input: Float32Array, model: ModelName): Promise<ClassScores> {
  const net = await loadReference(model);
  await useCpu();
  const size = Math.round(Math.sqrt(input.length / 3));
  const out = tf.tidy(() => net.model.predict(tf.tensor4d(input, [1, size, size, 3])) as tf.Tensor);
  try {
    const values = await out.data();
    return Object.fromEntries(CLASS_NAMES.map((c, i) => [c, values[i] as number])) as ClassScores;
  } finally {
    out.dispose();
  }
}
