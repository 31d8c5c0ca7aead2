// Loads the configured model into a pool of scoring workers (one ONNX session each); the bundled
// nsfwjs weights are converted on first use, checksummed.

import type { Config } from '../../common/config.ts';
import type { ImageScorer } from '../scoring/image-scorer.ts';
import { WorkerPoolScorer } from '../scoring/worker-pool-scorer.ts';

export function loadScorer(config: Config, onWorkerError: (err: Error) => void): Promise<ImageScorer> {
  return WorkerPoolScorer.create({
    model: config.model,
    workers: config.concurrency.active,
    intraOpThreads: config.inferenceThreads,
    limits: config.limits,
    onWorkerError,
  });
}
