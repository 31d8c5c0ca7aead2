// An ensemble of models (MODEL=mobilenet_v2+open_nsfw): each member scores the same decoded frame, each
// through its own preprocessing, and the ensemble answers the mean of the members' scores.nsfw and the
// mean of their scores.sfw, with each member's own scores beside (data.classes). Its input is the
// members' inputs one after another, in the members' order (toModelInput makes it from one decode);
// classify hands each member its part.

import type { ModelChoice, ModelName } from '../../../lib/common/model-catalogue.ts';
import { type Classifier, type EnsembleScores, type ModelScores, summarize } from './classifier.ts';

export class EnsembleClassifier implements Classifier {
  readonly name: ModelChoice;
  /** The largest member's edge (for traces); the members' own sizes make the input. */
  readonly inputSize: number;
  readonly #members: readonly Classifier[];
  readonly #lengths: readonly number[];

  constructor(name: ModelChoice, members: readonly Classifier[]) {
    if (members.length < 2) throw new RangeError(`${name}: an ensemble has at least two members`);
    this.name = name;
    this.#members = members;
    this.#lengths = members.map((m) => m.inputSize * m.inputSize * 3);
    this.inputSize = Math.max(...members.map((m) => m.inputSize));
  }

  async classify(input: Float32Array): Promise<EnsembleScores> {
    const total = this.#lengths.reduce((a, b) => a + b, 0);
    if (input.length !== total) {
      throw new RangeError(
        `${this.name}: expected ${total} floats (the members' inputs), got ${input.length}`,
      );
    }
    let offset = 0;
    let nsfw = 0;
    let sfw = 0;
    const members: Partial<Record<ModelName, ModelScores>> = {};
    for (const [i, member] of this.#members.entries()) {
      const length = this.#lengths[i] as number;
      const own = await member.classify(input.subarray(offset, offset + length));
      const scores = summarize(own, member.name);
      offset += length;
      nsfw += scores.nsfw;
      sfw += scores.sfw;
      // Members are single models (modelChoiceProblem refuses nesting): their name is a ModelName.
      members[member.name as ModelName] = own;
    }
    return { nsfw: nsfw / this.#members.length, sfw: sfw / this.#members.length, members };
  }

  async close(): Promise<void> {
    await Promise.all(this.#members.map((m) => m.close()));
  }
}
