// One scoring worker thread: its own ONNX Runtime session, decoding and inference off the main event
// loop. Messages: {id, bytes, probed} in; {id, ok, ...scored} or {id, ok: false, code?, message} out.

import { parentPort, workerData } from 'node:worker_threads';
import sharp from 'sharp';
import { isApiError } from '../../common/errors.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import type { ModelName } from '../model/classifier.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from './image-scorer.ts';

export interface ScorerWorkerData {
  model: ModelName;
  intraOpThreads: number;
  limits: DimensionLimits;
}

export interface ScoreRequest {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
}

if (!parentPort) throw new Error('scorer-worker must run in a worker thread');
const port = parentPort;
const data = workerData as ScorerWorkerData;

try {
  const classifier = await createOnnxClassifier({ model: data.model, intraOpThreads: data.intraOpThreads });
  const scorer = new InProcessScorer(classifier, data.limits);
  // One warm-up image through the whole unit of work before reporting ready: the first decode and
  // inference set up libvips and ORT's memory arena, which would otherwise land on a caller.
  const warmUp = await sharp({ create: { width: 640, height: 480, channels: 3, background: '#808080' } })
    .jpeg()
    .toBuffer();
  await scorer.score(warmUp, { format: 'jpeg', width: 640, height: 480, frames: 1 });
  port.on('message', async ({ id, bytes, probed }: ScoreRequest) => {
    try {
      port.postMessage({ id, ok: true, ...(await scorer.score(bytes, probed)) });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      port.postMessage({ id, ok: false, code: isApiError(err) ? err.code : undefined, message });
    }
  });
  port.postMessage({ ready: true });
} catch (err) {
  port.postMessage({ fatal: err instanceof Error ? err.message : String(err) });
}
