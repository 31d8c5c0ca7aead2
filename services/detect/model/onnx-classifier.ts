// The Classifier of nsfwjs's models, backed by onnxruntime-node: one InferenceSession per model
// (ort-session.ts; every other family has its own classifier, which createOnnxClassifier finds by the
// model's family driver, family-drivers.ts). The ONNX graphs are built by
// models/convert.ts (a build step: `npm run models`) and only loaded here, checksummed (model-file.ts).
// Their input is NHWC float32 [N, S, S, 3] in [0, 1], their output the softmax probabilities [N, 5]
// in nsfwjs's class order.
//
// Note: onnxruntime-node runs a session synchronously on the calling JS thread (inside a
// setImmediate), so a classify() blocks this thread's event loop for the whole inference and
// concurrent calls on one session execute one after another. intraOpThreads is what spreads one
// inference over more cores.

import * as ort from 'onnxruntime-node';
import {
  ENSEMBLE_JOIN,
  MODELS,
  type ModelChoice,
  type ModelName,
  modelMembers,
  type NsfwjsModelName,
} from '../../../lib/common/model-catalogue.ts';
import { CLASS_NAMES, type Classifier, type ClassScores } from './classifier.ts';
import { EnsembleClassifier } from './ensemble-classifier.ts';
import { driverOf } from './family-drivers.ts';
import { verifiedModelFile } from './model-file.ts';
import { openSession } from './ort-session.ts';

export { disableOrtTelemetry } from './ort-session.ts';

export interface OnnxClassifierOptions<M extends ModelChoice = ModelName> {
  model: M;
  /**
   * Threads one inference may use (ORT intra-op pool, the calling thread included). Default 1.
   * Measured on the 2-core box: mobilenet_v2 ~11 ms with 1 thread, ~6.6 ms with 2;
   * inception_v3 ~115 ms with 1, ~68 ms with 2.
   */
  intraOpThreads?: number;
  /** Path of the .onnx file; by default models/<model>.onnx, verified against checksums.json. */
  modelPath?: string;
}

const INPUT = 'input';
const OUTPUT = 'probabilities';

export class OnnxClassifier implements Classifier {
  readonly inputSize: number;
  private readonly elements: number;
  private readonly dims: readonly number[];
  private closed = false;

  private constructor(
    readonly name: NsfwjsModelName,
    private readonly session: ort.InferenceSession,
  ) {
    this.inputSize = MODELS[name].inputSize;
    this.elements = this.inputSize * this.inputSize * 3;
    this.dims = [1, this.inputSize, this.inputSize, 3];
  }

  static async create(opts: OnnxClassifierOptions<NsfwjsModelName>): Promise<OnnxClassifier> {
    const file = opts.modelPath ?? (await verifiedModelFile(opts.model));
    const session = await openSession(file, opts.intraOpThreads ?? 1, { input: INPUT, output: OUTPUT });
    return new OnnxClassifier(opts.model, session);
  }

  async classify(input: Float32Array): Promise<ClassScores> {
    const [scores] = await this.run(input, 1, this.dims);
    return scores as ClassScores;
  }

  /** Several images in one run (batch dimension N). Each input is [1, S, S, 3]. */
  async classifyBatch(inputs: readonly Float32Array[]): Promise<ClassScores[]> {
    if (inputs.length === 0) return [];
    if (inputs.length === 1) return this.run(inputs[0] as Float32Array, 1, this.dims);
    const batch = new Float32Array(inputs.length * this.elements);
    inputs.forEach((x, i) => {
      this.checkLength(x);
      batch.set(x, i * this.elements);
    });
    return this.run(batch, inputs.length, [inputs.length, this.inputSize, this.inputSize, 3]);
  }

  private checkLength(x: Float32Array): void {
    if (x.length !== this.elements) {
      throw new RangeError(
        `${this.name}: expected ${this.elements} floats ([1,${this.inputSize},${this.inputSize},3]), got ${x.length}`,
      );
    }
  }

  private async run(data: Float32Array, n: number, dims: readonly number[]): Promise<ClassScores[]> {
    if (this.closed) throw new Error(`${this.name}: classifier is closed`);
    if (n === 1) this.checkLength(data);
    // The tensor wraps `data` without copying.
    const results = await this.session.run({ [INPUT]: new ort.Tensor('float32', data, dims) });
    const out = results[OUTPUT];
    if (!out) throw new Error(`${this.name}: no '${OUTPUT}' output`);
    const probs = out.data as Float32Array;
    const k = CLASS_NAMES.length;
    const scores: ClassScores[] = [];
    for (let b = 0; b < n; b++) {
      const s = {} as ClassScores;
      CLASS_NAMES.forEach((c, i) => {
        s[c] = probs[b * k + i] as number;
      });
      scores.push(s);
    }
    out.dispose();
    return scores;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.session.release();
  }
}

/**
 * The classifier of any choice: a single model's by its family's driver (nsfwjs's family here, open_nsfw
 * in open-nsfw-classifier.ts), an ensemble of them in ensemble-classifier.ts.
 */
export function createOnnxClassifier(opts: OnnxClassifierOptions<NsfwjsModelName>): Promise<OnnxClassifier>;
export function createOnnxClassifier(opts: OnnxClassifierOptions<ModelChoice>): Promise<Classifier>;
export async function createOnnxClassifier(opts: OnnxClassifierOptions<ModelChoice>): Promise<Classifier> {
  const { model } = opts;
  if (model.includes(ENSEMBLE_JOIN)) {
    if (opts.modelPath !== undefined) throw new Error(`${model}: an ensemble loads each member's own file`);
    const members: Classifier[] = [];
    try {
      for (const member of modelMembers(model))
        members.push(await createOnnxClassifier({ ...opts, model: member }));
    } catch (err) {
      await Promise.all(members.map((m) => m.close()));
      throw err;
    }
    return new EnsembleClassifier(model, members);
  }
  return driverOf(model as ModelName).classifier({ ...opts, model: model as ModelName });
}
