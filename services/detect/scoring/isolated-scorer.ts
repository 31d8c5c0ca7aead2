// The production scorer: each image decoded in a decoder process (decoder-pool.ts), where a kill is
// safe and harms no other image, and its model input inferred in a scoring worker thread
// (worker-pool-scorer.ts), where a fixed-size tensor costs the same for every image. Exact: the
// decoder runs the same decodeForModel as InProcessScorer, and the tensor crosses the process
// boundary as the same float32 values.

import type { ModelChoice } from '../../../lib/policy/model-catalogue.ts';
import type { ProbedImage } from '../image/types.ts';
import type { DecoderPool } from './decoder-pool.ts';
import {
  type ImageScorer,
  isLargeImage,
  type ScoredImage,
  type ScorerState,
  type StillHeld,
} from './image-scorer.ts';
import type { WorkerPoolScorer } from './worker-pool-scorer.ts';

export class IsolatedScorer implements ImageScorer {
  readonly model: ModelChoice;
  readonly inputSize: number;
  readonly #decoders: DecoderPool;
  readonly #inference: WorkerPoolScorer;

  constructor(decoders: DecoderPool, inference: WorkerPoolScorer) {
    this.#decoders = decoders;
    this.#inference = inference;
    this.model = inference.model;
    this.inputSize = inference.inputSize;
  }

  /** The inference threads' state; `recovering` also while no decoder can take an image. */
  get state(): ScorerState {
    const state = this.#inference.state;
    return state === 'ready' && !this.#decoders.ready ? 'recovering' : state;
  }

  /** The decoder processes' ids (their memory is the server's too). */
  get decoderPids(): number[] {
    return this.#decoders.pids;
  }

  async score(bytes: Uint8Array, probed: ProbedImage, stillHeld?: StillHeld): Promise<ScoredImage> {
    const decoded = await this.#decoders.decode(bytes, probed, isLargeImage(bytes, probed), stillHeld);
    const scored = await this.#inference.infer(decoded.tensor, probed);
    const { pdq, decodeStartedAt, decodeMs } = decoded;
    return { ...scored, decodeStartedAt, decodeMs, ...(pdq && { pdq }) };
  }

  async close(): Promise<void> {
    await Promise.all([this.#decoders.close(), this.#inference.close()]);
  }
}
