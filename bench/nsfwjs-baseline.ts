// Benchmark baseline: nsfwjs itself on @tensorflow/tfjs-backend-wasm (XNNPACK, SIMD), classifying
// decoded RGB images through its own path (tensor3d → /255 → resizeBilinear(alignCorners) → model).
// The .wasm binaries are read from node_modules; nothing is fetched.
//
//   npx tsx bench/nsfwjs-baseline.ts [mobilenet_v2|inception_v3] [seconds]   (smoke run)

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs';
import sharp from 'sharp';
import {
  floatSourceOf,
  isNsfwjsModel,
  MODELS,
  type ModelChoice,
  type ModelName,
} from '../lib/common/model-catalogue.ts';
import { loadReference } from '../models/nsfwjs-reference.ts';

export interface RgbImage {
  rgb: Uint8Array;
  width: number;
  height: number;
  /** The encoded file, for the variant that decodes inside the timed loop. */
  jpeg?: Buffer;
}

/**
 * Classifies the images round-robin with nsfwjs on wasm for about `seconds` (after one warm-up pass
 * over the first image) and reports the throughput. Tensor creation and nsfwjs's own preprocessing
 * are inside the timed loop; decoding is not.
 */
export async function nsfwjsWasmImagesPerSecond(
  rgbImages: RgbImage[],
  /** decode: also decode each file (sharp, as our service does) inside the timed loop. */
  opts: { model: ModelChoice; seconds: number; decode?: boolean },
): Promise<{ imagesPerSecond: number; count: number }> {
  if (rgbImages.length === 0) throw new Error('no images to classify');
  const model = opts.model;
  if (!isNsfwjsModel(model)) throw new Error(`${model} is not an nsfwjs model: it has no nsfwjs baseline`);
  const net = await loadReference(floatSourceOf(model), 'wasm');

  const classify = async (img: RgbImage) => {
    let { rgb, width, height } = img;
    if (opts.decode) {
      if (!img.jpeg) throw new Error('decode needs the encoded file');
      const { data, info } = await sharp(img.jpeg)
        .rotate()
        .removeAlpha()
        .raw()
        .toBuffer({ resolveWithObject: true });
      ({ width, height } = info);
      rgb = data;
    }
    const t = tf.tensor3d(rgb, [height, width, 3], 'int32');
    try {
      await net.classify(t, 5);
    } finally {
      t.dispose();
    }
  };

  await classify(rgbImages[0] as RgbImage);
  const budget = opts.seconds * 1000;
  const started = performance.now();
  let count = 0;
  let elapsed = 0;
  do {
    await classify(rgbImages[count % rgbImages.length] as RgbImage);
    count++;
    elapsed = performance.now() - started;
  } while (elapsed < budget);
  return { imagesPerSecond: (count * 1000) / elapsed, count };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const model = (process.argv[2] ?? 'mobilenet_v2') as ModelName;
  const seconds = Number(process.argv[3] ?? 5);
  const size = MODELS[model].inputSize;
  // A few synthetic images, at and off the model size, so the resize path runs too.
  const images = [size, 480, 333].map((edge, k) => {
    const rgb = new Uint8Array(edge * edge * 3);
    for (let i = 0; i < rgb.length; i++) rgb[i] = (i * (7 + k) + (i >> 9)) & 255;
    return { rgb, width: edge, height: edge };
  });
  nsfwjsWasmImagesPerSecond(images, { model, seconds }).then(
    (r) =>
      console.log(
        `nsfwjs ${model} on tfjs wasm (${tf.getBackend()}): ${r.imagesPerSecond.toFixed(2)} images/s over ${r.count} images`,
      ),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
