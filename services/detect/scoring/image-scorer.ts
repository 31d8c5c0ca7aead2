// The capability the detect route needs after the header probe: bytes in, class scores out, with the
// time spent decoding and inferring (for timing_ms and the decode/inference spans). The worker pool
// implementation runs this off the event loop; the in-process one serves tests and tools.

import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import { type DecodeOptions, toModelInput } from '../image/decode.ts';
import { SHRINK_ON_LOAD_ABOVE_PIXELS } from '../image/image-cost.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import type { Classifier, ModelScores } from '../model/classifier.ts';
import { classifyTiles, type FramesScored, withInputFrames } from '../model/tiled-classify.ts';
import { releaseBuffer } from './release-buffer.ts';

export interface ScoredImage {
  scores: ModelScores;
  /** Wall-clock start of decoding, epoch milliseconds (fractional). */
  decodeStartedAt: number;
  decodeMs: number;
  inferenceMs: number;
  /** Several frames scored (MAX_FRAMES_SCORED > 1 on an animation): how many, and which one answered. */
  frames?: FramesScored;
  /** PDQ of the decoded frame (before trims and tiles), for hash-list matching. */
  pdq?: ImagePdq;
}

/**
 * `ready`: can score now. `recovering`: no worker can, one is being replaced (not ready). `wedged`: the
 * process has lost threads it cannot get back (not live: restart it).
 */
export type ScorerState = 'ready' | 'recovering' | 'wedged';

export interface ImageScorer {
  readonly model: ModelChoice;
  readonly inputSize: number;
  readonly state: ScorerState;
  /**
   * Decodes the first frame and scores it. Throws ApiError 4005 for undecodable input.
   * Takes ownership of `bytes`: an implementation may transfer the buffer to another thread, after
   * which the caller's view is empty. Read anything you need from it first.
   * `stillHeld`, when given, is told of memory the image goes on holding after its answer: a decode
   * killed at its deadline holds its memory until its process has ended (the promise settles then).
   * `perImage`: what this request sets over the scorer's own configuration (the DetectionPolicy's).
   */
  score(
    bytes: Uint8Array,
    probed: ProbedImage,
    stillHeld?: StillHeld,
    perImage?: PerImage,
  ): Promise<ScoredImage>;
  close(): Promise<void>;
}

/**
 * What a request may set for its image over the scorer's configuration: MAX_FRAMES_SCORED as the
 * DetectionPolicy in force states it (read once per request, like the thresholds).
 */
export interface PerImage {
  maxFramesScored?: number;
  /**
   * Hash the decoded frame with PDQ (PDQ_HASHES=on, or auto while a hash list is in force); unset: the
   * scorer's configuration.
   */
  pdq?: boolean;
  /**
   * Told of the decoded frame's PDQ (PDQ_HASHES) as soon as it is known, before inference: hash-list
   * matching then runs on the caller's thread while the image is inferred. Must not throw.
   */
  onPdq?: (pdq: ImagePdq) => void;
}

/** Told of memory an answered image still holds, until `released` settles. */
export type StillHeld = (released: Promise<void>) => void;

export const epochNow = (): number => performance.timeOrigin + performance.now();

/**
 * Upload plus decoded RGB above this is a large image (~10 MP and up): all decoder processes but one
 * may hold one (decoder-pool.ts), so a small image always finds a decoder; a scoring worker that
 * decodes holds at most one at a time (and collects garbage right after it).
 */
export const LARGE_IMAGE_BYTES = 32 * 1024 * 1024;

export function isLargeImage(bytes: Uint8Array, probed: ProbedImage): boolean {
  return bytes.byteLength + probed.width * probed.height * 3 > LARGE_IMAGE_BYTES;
}

export function needsShrinkOnLoad(probed: ProbedImage): boolean {
  return probed.format === 'jpeg' && probed.width * probed.height > SHRINK_ON_LOAD_ABOVE_PIXELS;
}

/**
 * The decode half of the unit of work: the model input for `bytes`, exactly as every scorer makes it
 * (the libjpeg fast path first where chosen, shrink-on-load only where a full decode would cost too
 * much), and the decoded frame's PDQ. Runs in the decoder processes (decoder-process.ts) and in
 * InProcessScorer.
 */
export async function decodeForModel(
  bytes: Uint8Array,
  probed: ProbedImage,
  inputSize: number,
  decode: DecodeOptions,
): Promise<{ tensor: Float32Array; pdq?: ImagePdq }> {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const input = await toModelInput(buffer, probed, inputSize, {
    ...decode,
    shrinkOnLoad: needsShrinkOnLoad(probed) ? 'if-declined' : false,
  });
  return {
    tensor: input.inputFrames ? withInputFrames(input.tensor, input.inputFrames) : input.tensor,
    ...(input.pdq && { pdq: input.pdq }),
  };
}

/** Decode and inference on the calling thread: the unit of work, also used inside each pool worker. */
export class InProcessScorer implements ImageScorer {
  readonly model: ModelChoice;
  readonly inputSize: number;
  readonly state = 'ready';
  readonly #classifier: Classifier;
  readonly #decode: DecodeOptions;

  /**
   * `jpegDecoder`: see DecodeOptions (default: the libjpeg fast path where it was built). `maxTiles`:
   * margins trimmed and long frames tiled as the decoder processes do (unset: the whole frame, as nsfwjs).
   */
  constructor(
    classifier: Classifier,
    limits?: DimensionLimits,
    jpegDecoder?: JpegDecoder,
    maxTiles?: number,
    maxFramesScored?: number,
    pdq?: boolean,
  ) {
    this.#classifier = classifier;
    this.model = classifier.name;
    this.inputSize = classifier.inputSize;
    this.#decode = {
      model: classifier.name,
      ...(limits ? { limits } : {}),
      ...(jpegDecoder ? { jpegDecoder } : {}),
      ...(maxTiles !== undefined ? { maxTiles } : {}),
      ...(maxFramesScored !== undefined ? { maxFramesScored } : {}),
      ...(pdq ? { pdq } : {}),
    };
  }

  async score(
    bytes: Uint8Array,
    probed: ProbedImage,
    _stillHeld?: StillHeld,
    perImage: PerImage = {},
  ): Promise<ScoredImage> {
    const decodeStartedAt = epochNow();
    const { tensor, pdq } = await decodeForModel(bytes, probed, this.inputSize, {
      ...this.#decode,
      ...(perImage.maxFramesScored !== undefined && { maxFramesScored: perImage.maxFramesScored }),
      ...(perImage.pdq !== undefined && { pdq: perImage.pdq }),
    });
    const decodeMs = epochNow() - decodeStartedAt;
    if (pdq) perImage.onPdq?.(pdq);
    return { ...(await this.infer(tensor)), decodeStartedAt, decodeMs, ...(pdq && { pdq }) };
  }

  /**
   * Inference alone, on a model input made by decodeForModel (one input per tile of a long frame: the
   * highest tile answers); takes ownership of `tensor`.
   */
  async infer(
    tensor: Float32Array,
  ): Promise<{ scores: ModelScores; inferenceMs: number; frames?: FramesScored }> {
    const inferenceStartedAt = epochNow();
    let classified: Awaited<ReturnType<typeof classifyTiles>>;
    try {
      classified = await classifyTiles(this.#classifier, tensor);
    } finally {
      // The input tensor is ours alone (made by toModelInput) and done with.
      releaseBuffer(tensor);
    }
    return { ...classified, inferenceMs: epochNow() - inferenceStartedAt };
  }

  close(): Promise<void> {
    return this.#classifier.close();
  }
}
