// The production scorer: each image decoded where its header says it is safe to (decode-route.ts) —
// an ordinary one in the scoring worker thread that infers it (worker-pool-scorer.ts: no process hop,
// no second runtime), anything costly or unusual in a decoder process (decoder-pool.ts), where a kill
// at its CPU limit or deadline is safe and harms no other image, its model input then inferred in a
// worker thread. Exact either way: both paths run the same decodeForModel, and the tensor crosses the
// process boundary as the same float32 values.

import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import type { ProbedImage } from '../image/types.ts';
import { type DecodeRoute, decodeFacts, decodeRoute, type InProcessBounds } from './decode-route.ts';
import type { DecoderPool } from './decoder-pool.ts';
import {
  type ImageScorer,
  isLargeImage,
  type PerImage,
  type ScoredImage,
  type ScorerState,
  type StillHeld,
} from './image-scorer.ts';
import type { WorkerPoolScorer } from './worker-pool-scorer.ts';

export class RoutedScorer implements ImageScorer {
  readonly model: ModelChoice;
  readonly inputSize: number;
  readonly #decoders: DecoderPool;
  readonly #workers: WorkerPoolScorer;
  readonly #bounds: InProcessBounds;
  readonly #onRoute: ((route: DecodeRoute, probed: ProbedImage) => void) | undefined;

  constructor(
    decoders: DecoderPool,
    workers: WorkerPoolScorer,
    bounds: InProcessBounds,
    /** Told of each image's route (tests, metrics). */
    onRoute?: (route: DecodeRoute, probed: ProbedImage) => void,
  ) {
    this.#decoders = decoders;
    this.#workers = workers;
    this.#bounds = bounds;
    this.#onRoute = onRoute;
    this.model = workers.model;
    this.inputSize = workers.inputSize;
  }

  /** The worker threads' state; `recovering` also while decoder processes cannot be started. */
  get state(): ScorerState {
    const state = this.#workers.state;
    return state === 'ready' && !this.#decoders.ready ? 'recovering' : state;
  }

  /** The decoder processes' ids, those still exiting included (their memory is the server's too). */
  get decoderPids(): number[] {
    return this.#decoders.pids;
  }

  async score(
    bytes: Uint8Array,
    probed: ProbedImage,
    stillHeld?: StillHeld,
    perImage: PerImage = {},
  ): Promise<ScoredImage> {
    // Read before scoring: the worker pool transfers the buffer, which empties it here.
    const bounds =
      perImage.maxFramesScored === undefined
        ? this.#bounds
        : { ...this.#bounds, maxFramesScored: perImage.maxFramesScored };
    const route = decodeRoute(decodeFacts(bytes, probed), bounds);
    this.#onRoute?.(route, probed);
    // In process, an image is scored by its first frame alone: several frames are always isolated.
    if (route.path === 'in-process') return this.#workers.score(bytes, probed, undefined, perImage);
    const decoded = await this.#decoders.decode(
      bytes,
      probed,
      isLargeImage(bytes, probed),
      stillHeld,
      perImage,
    );
    const { pdq, decodeStartedAt, decodeMs } = decoded;
    if (pdq) perImage.onPdq?.(pdq);
    const scored = await this.#workers.infer(decoded.tensor, probed);
    return { ...scored, decodeStartedAt, decodeMs, ...(pdq && { pdq }) };
  }

  async close(): Promise<void> {
    await Promise.all([this.#decoders.close(), this.#workers.close()]);
  }
}
