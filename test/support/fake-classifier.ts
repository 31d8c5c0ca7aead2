// A Classifier whose scores the test chooses, for fast HTTP tests. The real model is exercised by the
// corpus, parity and end-to-end suites.

import type { ModelName } from '../../lib/common/model-catalogue.ts';
import type { Classifier, ClassScores } from '../../services/detect/model/classifier.ts';

export const NEUTRAL: ClassScores = { drawing: 0, hentai: 0, neutral: 1, porn: 0, sexy: 0 };

export class FakeClassifier implements Classifier {
  readonly name: ModelName = 'mobilenet_v2';
  readonly inputSize = 224;
  scores: ClassScores = NEUTRAL;
  /** Milliseconds each classify() waits, to hold work in flight. */
  delayMs = 0;
  calls = 0;
  lastInputLength = 0;

  async classify(input: Float32Array): Promise<ClassScores> {
    this.calls += 1;
    this.lastInputLength = input.length;
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    return this.scores;
  }

  async close(): Promise<void> {}
}
