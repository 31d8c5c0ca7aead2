// Decorators that feed the detect service's metrics (metrics.ts) without the work
// gate or the scorer knowing about Prometheus. The detect server wraps its parts in them.

import type { ApiError } from '../../lib/common/errors.ts';
import type { ProbedImage } from './image/types.ts';
import type { DetectMetrics } from './metrics.ts';
import type { ImageScorer, PerImage, ScoredImage, StillHeld } from './scoring/image-scorer.ts';
import { WorkGate } from './work-gate.ts';

/** The work gate, counting its refusals by reason. */
export class MeteredGate extends WorkGate {
  readonly #metrics: DetectMetrics;
  #closing = false;

  constructor(opts: ConstructorParameters<typeof WorkGate>[0], metrics: DetectMetrics) {
    super(opts);
    this.#metrics = metrics;
  }

  // Every 503 the gate causes is built here (no room, per-client or byte bound, shutting down).
  override busy(what?: string): ApiError {
    this.#metrics.refusals.inc({ reason: this.#closing ? 'shutting_down' : 'busy' });
    return super.busy(what);
  }

  override close(): void {
    this.#closing = true;
    super.close();
  }
}

/** The scorer, observing each image's decode and inference time (measured in the worker). */
export class MeteredScorer implements ImageScorer {
  readonly #inner: ImageScorer;
  readonly #metrics: DetectMetrics;

  constructor(inner: ImageScorer, metrics: DetectMetrics) {
    this.#inner = inner;
    this.#metrics = metrics;
  }

  get model() {
    return this.#inner.model;
  }

  get inputSize() {
    return this.#inner.inputSize;
  }

  get state() {
    return this.#inner.state;
  }

  async score(
    bytes: Uint8Array,
    probed: ProbedImage,
    stillHeld?: StillHeld,
    perImage?: PerImage,
  ): Promise<ScoredImage> {
    const scored = await this.#inner.score(bytes, probed, stillHeld, perImage);
    const labels = { model: this.#inner.model };
    this.#metrics.decode.observe(labels, scored.decodeMs / 1000);
    this.#metrics.inference.observe(labels, scored.inferenceMs / 1000);
    return scored;
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
