// nsfwjs itself: the reference our ONNX models are compared with, on @tensorflow/tfjs's pure-JS CPU
// backend (exact, slow) or on @tensorflow/tfjs-backend-wasm (the benchmark baseline; fast enough to
// walk the whole corpus). Loads the models bundled in the package (no network): nsfwjs.load
// dynamically imports dist/models/<name>/*.min.js, CommonJS modules on disk; the .wasm binaries are
// read from node_modules.

import { createRequire } from 'node:module';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
import * as nsfwjs from 'nsfwjs';
import type { FloatModelName } from '../lib/common/model-catalogue.ts';
import { CLASS_NAMES, type ClassName, type ClassScores } from '../services/detect/model/classifier.ts';

const NSFWJS_MODEL: Record<FloatModelName, 'MobileNetV2' | 'InceptionV3'> = {
  mobilenet_v2: 'MobileNetV2',
  inception_v3: 'InceptionV3',
};

export type ReferenceBackend = 'cpu' | 'wasm';

const loaded = new Map<string, Promise<nsfwjs.NSFWJS>>();
let wasmPathsSet = false;

/**
 * Makes `backend` tfjs's active one (tfjs has a single global backend). Under Node, tfjs's wasm
 * backend always picks its single-threaded SIMD binary (WASM_HAS_MULTITHREAD_SUPPORT is false on
 * Node, tensorflow/tfjs#3830), so it uses one core.
 */
async function useBackend(backend: ReferenceBackend): Promise<void> {
  if (backend === 'wasm' && !wasmPathsSet) {
    const require = createRequire(import.meta.url);
    setWasmPaths(`${path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm'))}${path.sep}`);
    wasmPathsSet = true;
  }
  if (tf.getBackend() !== backend && !(await tf.setBackend(backend))) {
    throw new Error(`tfjs ${backend} backend unavailable`);
  }
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

/** nsfwjs with `model` loaded on `backend` (cached), with that backend active. */
export async function loadReference(
  model: FloatModelName,
  backend: ReferenceBackend = 'cpu',
): Promise<nsfwjs.NSFWJS> {
  const key = `${model}/${backend}`;
  let p = loaded.get(key);
  if (!p) {
    p = quietly(async () => {
      await useBackend(backend);
      return nsfwjs.load(NSFWJS_MODEL[model]); // also runs a warm-up prediction
    });
    loaded.set(key, p);
    p.catch(() => loaded.delete(key));
  }
  const net = await p;
  await useBackend(backend);
  return net;
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
  model: FloatModelName,
  backend: ReferenceBackend = 'cpu',
): Promise<ClassScores> {
  if (rgb.length !== width * height * 3)
    throw new Error(`expected ${width}x${height}x3 bytes, got ${rgb.length}`);
  const net = await loadReference(model, backend);
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
export async function referenceScoresFromTensor(
  input: Float32Array,
  model: FloatModelName,
): Promise<ClassScores> {
  const net = await loadReference(model);
  const size = Math.round(Math.sqrt(input.length / 3));
  const out = tf.tidy(() => net.model.predict(tf.tensor4d(input, [1, size, size, 3])) as tf.Tensor);
  try {
    const values = await out.data();
    return Object.fromEntries(CLASS_NAMES.map((c, i) => [c, values[i] as number])) as ClassScores;
  } finally {
    out.dispose();
  }
}
