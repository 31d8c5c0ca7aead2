// Holds the loaded scorer. The server listens before the model is loaded (health answers, and
// readiness says "not yet"); detect requests get 503/5001 until the slot is filled.

import type { ImageScorer } from './image-scorer.ts';

export class ScorerSlot {
  #current: ImageScorer | undefined;

  get current(): ImageScorer | undefined {
    return this.#current;
  }

  fill(scorer: ImageScorer): void {
    this.#current = scorer;
  }

  async close(): Promise<void> {
    const current = this.#current;
    this.#current = undefined;
    await current?.close();
  }
}
