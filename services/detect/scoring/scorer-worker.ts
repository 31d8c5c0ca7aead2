// One scoring worker thread: inference, and the decoding of ordinary images (decode-route.ts), off the
// main event loop. Messages: {id, bytes, probed, solo, tensor?} in — with `tensor`, a model input a decoder
// process made, only inference runs — and {id, ok, ...scored} or {id, ok: false, code?, message} out.
//
// A single-threaded ONNX Runtime session, used while other images are being scored too (every core is
// already busy; a second intra-op thread would only add hand-offs, measured ~3.5 ms of extra CPU per
// 1 MP image). The pool's first worker also holds a session with `soloThreads` threads, used when its
// image is the only one in the pool: the idle core then cuts the inference time (~8.5 → ~5.5 ms).

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parentPort, workerData } from 'node:worker_threads';
import sharp from 'sharp';
import { isApiError } from '../../../lib/common/errors.ts';
import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer, isLargeImage } from './image-scorer.ts';
import { releaseBuffer } from './release-buffer.ts';

export interface ScorerWorkerData {
  model: ModelChoice;
  /** Threads of the session for an image alone in the pool; 1 = no such session. */
  soloThreads: number;
  limits: DimensionLimits;
  jpegDecoder: JpegDecoder;
  /** Margins trimmed and long frames tiled, up to this many tiles, as the decoder processes do. */
  maxTiles: number;
  /** Also hash each decoded frame with PDQ (PDQ_HASHES). */
  pdq: boolean;
}

export interface ScoreRequest {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
  /** No other image is being scored: use the multi-threaded session. */
  solo: boolean;
  /** The model input, already decoded (by a decoder process): only inference runs here. */
  tensor?: Float32Array;
  /** Send the PDQ as soon as it is known, before inference ({id, pdq}): the caller matches it meanwhile. */
  earlyPdq?: boolean;
  /** Hash this image with PDQ (PerImage.pdq); unset: `pdq` of the worker's data. */
  pdq?: boolean;
}

if (!parentPort) throw new Error('scorer-worker must run in a worker thread');
const port = parentPort;
const data = workerData as ScorerWorkerData;

// A large image leaves its decoded pixels behind (~50 MB for a 4096×4000 PNG; sharp's buffer is freed
// only by a collection, unlike the upload and the model input, which are released once scored), and V8
// may collect only after the next large image has been decoded: the worker would briefly hold both. Collecting right after such an image (a few ms,
// next to the ~150 ms its decoding took) keeps the server's peak memory at one large image per worker.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

try {
  const shared = new InProcessScorer(
    await createOnnxClassifier({ model: data.model, intraOpThreads: 1 }),
    data.limits,
    data.jpegDecoder,
    data.maxTiles,
    undefined,
    data.pdq,
  );
  const solo =
    data.soloThreads > 1
      ? new InProcessScorer(
          await createOnnxClassifier({ model: data.model, intraOpThreads: data.soloThreads }),
          data.limits,
          data.jpegDecoder,
          data.maxTiles,
          undefined,
          data.pdq,
        )
      : shared;
  // One warm-up image through the whole unit of work (each session) before reporting ready: the first
  // decode and inference set up libvips and ORT's memory arena, which would otherwise land on a caller.
  const warmUp = await sharp({ create: { width: 640, height: 480, channels: 3, background: '#808080' } })
    .jpeg()
    .toBuffer();
  for (const scorer of new Set([shared, solo])) {
    await scorer.score(new Uint8Array(warmUp), { format: 'jpeg', width: 640, height: 480, frames: 1 });
  }
  port.on('message', async ({ id, bytes, probed, solo: alone, tensor, earlyPdq, pdq }: ScoreRequest) => {
    const large = tensor === undefined && isLargeImage(bytes, probed);
    try {
      const scorer = alone ? solo : shared;
      const scored = tensor
        ? { ...(await scorer.infer(tensor)), decodeStartedAt: 0, decodeMs: 0 }
        : await scorer.score(bytes, probed, undefined, {
            ...(pdq !== undefined && { pdq }),
            ...(earlyPdq && { onPdq: (hash: ImagePdq) => port.postMessage({ id, pdq: hash }) }),
          });
      port.postMessage({ id, ok: true, ...scored });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      port.postMessage({ id, ok: false, code: isApiError(err) ? err.code : undefined, message });
    } finally {
      // The upload came by transfer or copy: this thread holds the only reference.
      releaseBuffer(bytes);
    }
    // After this handler has returned, so that nothing holds the image any more.
    if (large) setImmediate(collectGarbage);
  });
  port.postMessage({ ready: true });
} catch (err) {
  port.postMessage({ fatal: err instanceof Error ? err.message : String(err) });
}
