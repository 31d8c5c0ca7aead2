// Holds the loaded classifier. The server listens before the model is loaded (health answers, and
// readiness says "not yet"); detect requests get 503/5001 until the slot is filled.

import type { Classifier } from './classifier.ts';

export class ModelSlot {
  #current: Classifier | undefined;

  get current(): Classifier | undefined {
    return this.#current;
  }

  fill(classifier: Classifier): void {
    this.#current = classifier;
  }

  async close(): Promise<void> {
    const current = this.#current;
    this.#current = undefined;
    await current?.close();
  }
}
