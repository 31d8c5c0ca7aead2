// Our ONNX models against nsfwjs itself (tfjs, pure-JS CPU backend) on identical inputs, and the
// converter's determinism. InceptionV3 on the pure-JS backend takes ~40 s per forward pass (and
// nsfwjs.load runs one to warm up), so it gets a single input.

import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MODELS, type ModelName } from '../lib/common/model-catalogue.ts';
import { CLASS_NAMES, type ClassScores } from '../services/detect/model/classifier.ts';
import { createOnnxClassifier, type OnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import {
  ChecksumMismatchError,
  convertModel,
  convertToBytes,
  ensureModel,
  modelFile,
  readChecksums,
} from './convert.ts';
import { referenceScoresFromRgb, referenceScoresFromTensor } from './nsfwjs-reference.ts';

const TOLERANCE = 1e-4;

/** Deterministic pseudo-random generator (LCG) so every run sees the same inputs. */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function noiseRgb(size: number, seed: number): Uint8Array {
  const next = lcg(seed);
  return Uint8Array.from({ length: size * size * 3 }, () => Math.floor(next() * 256));
}

/** Smooth gradients with a few blobs: closer to natural image statistics than noise. */
function syntheticRgb(size: number): Uint8Array {
  const rgb = new Uint8Array(size * size * 3);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      const u = x / size;
      const v = y / size;
      const blob = Math.exp(-((u - 0.5) ** 2 + (v - 0.45) ** 2) * 12);
      const i = (y * size + x) * 3;
      rgb[i] = Math.round(255 * Math.min(1, 0.35 + 0.6 * blob + 0.1 * Math.sin(9 * u)));
      rgb[i + 1] = Math.round(255 * Math.min(1, 0.25 + 0.45 * blob * v));
      rgb[i + 2] = Math.round(255 * Math.min(1, 0.2 + 0.3 * (1 - v)));
    }
  }
  return rgb;
}

/** What nsfwjs does to pixels already at the model size: toFloat, /255 (float32). */
const toInput = (rgb: Uint8Array): Float32Array => Float32Array.from(rgb, (q) => q / 255);

const maxAbsDiff = (a: ClassScores, b: ClassScores): number =>
  Math.max(...CLASS_NAMES.map((c) => Math.abs(a[c] - b[c])));

function expectParity(model: ModelName, what: string, ours: ClassScores, ref: ClassScores): void {
  const diff = maxAbsDiff(ours, ref);
  console.log(`${model} ${what}: max abs diff ${diff.toExponential(2)}`);
  for (const c of CLASS_NAMES)
    expect(Math.abs(ours[c] - ref[c]), `${model} ${what} ${c}`).toBeLessThanOrEqual(TOLERANCE);
  const sum = CLASS_NAMES.reduce((s, c) => s + ours[c], 0);
  expect(sum).toBeCloseTo(1, 5);
}

describe.each([
  { model: 'mobilenet_v2' as const, moreInputs: true },
  { model: 'inception_v3' as const, moreInputs: false },
])('$model: ONNX vs nsfwjs', ({ model, moreInputs }) => {
  const size = MODELS[model].inputSize;
  let classifier: OnnxClassifier;

  beforeAll(async () => {
    classifier = await createOnnxClassifier({
      model,
      intraOpThreads: 2,
      modelPath: await ensureModel(model),
    });
  });
  afterAll(() => classifier?.close());

  test('noise image through nsfwjs.classify', { timeout: 180_000 }, async () => {
    const rgb = noiseRgb(size, 7);
    const ref = await referenceScoresFromRgb(rgb, size, size, model);
    expectParity(model, 'noise', await classifier.classify(toInput(rgb)), ref);
  });

  if (moreInputs) {
    test('smooth synthetic image through nsfwjs.classify', async () => {
      const rgb = syntheticRgb(size);
      const ref = await referenceScoresFromRgb(rgb, size, size, model);
      expectParity(model, 'synthetic', await classifier.classify(toInput(rgb)), ref);
    });

    test('arbitrary float tensor through model.predict', async () => {
      const next = lcg(99);
      const input = Float32Array.from({ length: size * size * 3 }, next);
      const ref = await referenceScoresFromTensor(input, model);
      expectParity(model, 'float tensor', await classifier.classify(input), ref);
    });
  }

  test('batch of two equals two single runs', async () => {
    const a = toInput(noiseRgb(size, 1));
    const b = toInput(syntheticRgb(size));
    const [ba, bb] = await classifier.classifyBatch([a, b]);
    expect(maxAbsDiff(ba as ClassScores, await classifier.classify(a))).toBeLessThan(1e-6);
    expect(maxAbsDiff(bb as ClassScores, await classifier.classify(b))).toBeLessThan(1e-6);
  });

  test('rejects an input of the wrong size', async () => {
    await expect(classifier.classify(new Float32Array(10))).rejects.toThrow(RangeError);
  });
});

describe('conversion', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'nsfw-convert-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  test.each(['mobilenet_v2', 'inception_v3'] as const)(
    '%s is deterministic and matches checksums.json',
    async (model) => {
      const recorded = (await readChecksums()).models[model];
      const first = await convertModel(model, { outDir: path.join(dir, 'a') });
      const second = await convertModel(model, { outDir: path.join(dir, 'b') });
      expect(first.sha256).toBe(recorded?.sha256);
      expect(second.sha256).toBe(first.sha256);
      expect(first.bytes).toBe(recorded?.bytes);
      expect(Buffer.compare(await readFile(first.file), await readFile(second.file))).toBe(0);
    },
  );

  // The packed weights (models/pack-weights.ts) are unpacked by onnxruntime into the unpacked model's
  // float32 tensors: the same scores to the bit, in a quarter of the bytes.
  test.each(['mobilenet_v2', 'inception_v3'] as const)(
    '%s packed scores exactly as unpacked, in at most a third of the bytes',
    async (model) => {
      const packed = convertToBytes(model);
      const unpacked = convertToBytes(model, { packed: false });
      expect(packed.length).toBeLessThan(unpacked.length / 3);
      const size = MODELS[model].inputSize;
      const input = new ort.Tensor(
        'float32',
        Float32Array.from(noiseRgb(size, 7), (v) => v / 255),
        [1, size, size, 3],
      );
      const scores = async (bytes: Uint8Array) => {
        const session = await ort.InferenceSession.create(bytes, { graphOptimizationLevel: 'all' });
        try {
          const data = (await session.run({ input })).probabilities?.data as Float32Array;
          return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        } finally {
          await session.release();
        }
      };
      const [a, b] = [await scores(packed), await scores(unpacked)];
      expect(a.length).toBe(4 * CLASS_NAMES.length);
      expect(a.equals(b), `${a.toString('hex')} vs ${b.toString('hex')}`).toBe(true);
    },
    120_000,
  );

  test('--if-missing keeps a good file and replaces a corrupted one', async () => {
    const outDir = path.join(dir, 'c');
    expect((await convertModel('mobilenet_v2', { outDir, ifMissing: true })).converted).toBe(true);
    expect((await convertModel('mobilenet_v2', { outDir, ifMissing: true })).converted).toBe(false);
    await writeFile(modelFile('mobilenet_v2', outDir), 'not a model');
    const file = await ensureModel('mobilenet_v2', { dir: outDir });
    expect(file).toBe(modelFile('mobilenet_v2', outDir));
    const digest = createHash('sha256')
      .update(await readFile(file))
      .digest('hex');
    expect(digest).toBe((await readChecksums()).models.mobilenet_v2?.sha256);
  });

  test('a checksum mismatch is a clear error and writes nothing', async () => {
    const checksumsFile = path.join(dir, 'checksums.json');
    await writeFile(
      checksumsFile,
      JSON.stringify({ nsfwjs: '0.0.0', models: { mobilenet_v2: { sha256: 'x', bytes: 1 } } }),
    );
    const outDir = path.join(dir, 'd');
    const attempt = convertModel('mobilenet_v2', { outDir, checksumsFile });
    await expect(attempt).rejects.toThrow(ChecksumMismatchError);
    await expect(attempt).rejects.toThrow(/--update-checksums/);
    await expect(readFile(modelFile('mobilenet_v2', outDir))).rejects.toThrow(/ENOENT/);
  });
});
