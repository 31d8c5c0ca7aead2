// How far the quantised model's scores.nsfw strays from the float model's, on the corpus images it was
// not calibrated on, and the bound it must meet to ship (MODEL offers it only then: classifier.ts).

import { MODELS } from '../lib/common/model-catalogue.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import type { Thresholds } from '../services/detect/result.ts';
import { decisionFor } from '../services/detect/result.ts';
import { corpusTensor, evaluationImages, INT8_MODEL } from './quantise.ts';

/**
 * The bound to ship (docs/quantised-model.md): every evaluation image within 0.05 of the float
 * score, and no allow/review/block decision changed at the default thresholds. 0.05 is half the width
 * of the allow band (0 – 0.10): an image the float model allows with any margin stays allowed, and the
 * score a client logs or re-thresholds stays the float model's to two decimals' worth.
 */
export const SHIP_BOUND = { maxAbs: 0.05, flips: 0 } as const;

export const withinShipBound = (f: Fidelity): boolean =>
  f.maxAbs <= SHIP_BOUND.maxAbs && f.flips.length <= SHIP_BOUND.flips;

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};
const quantile = (sorted: number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
const fmt = (x: number, digits: number) => x.toFixed(digits);

export interface Fidelity {
  images: number;
  maxAbs: number;
  p99Abs: number;
  medianAbs: number;
  flips: Array<{ image: string; float: number; int8: number }>;
  worst: string;
}

/** The int8 model's scores.nsfw against the float model's, on the evaluation images. */
export async function measureFidelity(
  int8Path: string,
  thresholds: Thresholds,
  images = evaluationImages(),
): Promise<Fidelity> {
  const float = await createOnnxClassifier({ model: 'mobilenet_v2', intraOpThreads: 2 });
  const int8 = await createOnnxClassifier({ model: INT8_MODEL, intraOpThreads: 2, modelPath: int8Path });
  const rows: Array<{ image: string; float: number; int8: number; abs: number }> = [];
  try {
    for (const image of images) {
      const tensor = await corpusTensor(image, MODELS.mobilenet_v2.inputSize);
      const a = nsfwOf(await float.classify(tensor));
      const b = nsfwOf(await int8.classify(tensor));
      rows.push({ image, float: a, int8: b, abs: Math.abs(a - b) });
    }
  } finally {
    await float.close();
    await int8.close();
  }
  const sorted = rows.map((r) => r.abs).sort((x, y) => x - y);
  const worst = rows.reduce((w, r) => (r.abs > w.abs ? r : w));
  return {
    images: rows.length,
    maxAbs: sorted.at(-1) as number,
    p99Abs: quantile(sorted, 0.99),
    medianAbs: median(sorted),
    flips: rows
      .filter((r) => decisionFor(r.float, thresholds) !== decisionFor(r.int8, thresholds))
      .map(({ image, float, int8 }) => ({ image, float, int8 })),
    worst: `${worst.image} (${fmt(worst.float, 4)} → ${fmt(worst.int8, 4)})`,
  };
}

const nsfwOf = (s: { porn: number; hentai: number; sexy: number }) => s.porn + s.hentai + s.sexy;
