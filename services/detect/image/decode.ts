// Decode → model input. Reproduces what nsfwjs does to an image before its model sees it
// (tf.browser.fromPixels: 8-bit RGB, alpha: see ALPHA below), then makes each model's input from it by
// its family's driver (model/family-drivers.ts; nsfwjs's resize is nsfwjs-input.ts).
//
// The decode half (`decodeRgb`) turns any whitelisted input into upright 8-bit sRGB RGB with sharp
// (BMP through our own decoder). toModelInput first offers a JPEG to the libjpeg fast path
// (libjpeg/jpeg-tensor.c: libjpeg-turbo with nsfwjs's resize done on the decoded rows, bit-identical)
// when every model's family takes that input; whatever it declines is decoded by sharp.
//
// Decoding rules:
// - EXIF / TIFF orientation applied (autoOrient), so the model sees the image upright;
// - CMYK, CIELAB, 16-bit, grey and palette images converted to 8-bit sRGB (embedded ICC profiles
//   honoured by sharp's default colour management, as a colour-managed browser would);
// - first frame / page only (`pages: 1, page: 0`), unless `maxFramesScored` asks for more (frames.ts);
// - ALPHA is flattened onto WHITE by default ('black' is an option). Why white:
//   * nsfwjs itself defines no flattening. In a browser, tf.browser.fromPixels draws the image on a
//     canvas, reads getImageData and keeps R, G, B: canvas stores are premultiplied, so fully
//     transparent pixels come back black and semi-transparent ones keep their un-premultiplied
//     colour; in Node (tf.node.decodeImage(buf, 3)) alpha is simply dropped and whatever RGB is
//     stored under it is used. The model was trained on opaque photos, so no background is "what
//     it was trained on"; the choice is about what the model gets to see.
//   * On black, dark content on a transparent background vanishes entirely: in the corpus
//     blackbug.png, image-in-alpha.png, trim-mc.png and 16-bit-grey-alpha.png flatten to an
//     all-black (blank) frame, i.e. an evasion path. On white none of the corpus images goes blank
//     (only full-transparent.png, which is blank either way).
//   * White is what a viewer sees on the default (light) page or app background.
//   The mirror risk (light content on transparent vanishes on white) remains; scoring on both
//   backgrounds and keeping the higher nsfw would close it, at twice the inference cost.
//
// Safety: sharp only ever receives bytes whose own signature matches the sniffed, whitelisted format
// (checked again here), only the whitelisted libvips loaders are enabled (sharp-restrictions.ts),
// `limitInputPixels` repeats the dimension limit as a second guard, `failOn` rejects truncated and
// corrupt data (each format's failOn, lib/common/image-formats.ts), probe.ts
// refuses beforehand, from the header, data too short for the size it claims, and a timeout bounds
// pathological inputs. Every decoder failure is 4005.
// Nothing is written to disk; sharp's operation cache is disabled so no pixels outlive a request.

import sharp, { type Sharp } from 'sharp';
import { ApiError, isApiError } from '../../../lib/common/errors.ts';
import { FORMATS, type FormatRow } from '../../../lib/common/image-formats.ts';
import { type ModelChoice, type ModelName, modelMembers } from '../../../lib/common/model-catalogue.ts';
import { driverOf, jpegFastPathServes } from '../model/family-drivers.ts';
import { apngFrames } from './apng.ts';
import { decodeBmp } from './bmp.ts';
import {
  contentBox,
  cropRgb,
  frameLayout,
  isFlatLine,
  isLongBox,
  isWholeFrame,
  MIN_MARGIN_FRACTION,
} from './frame-layout.ts';
import { framesToScore } from './frames.ts';
import { type JpegDecoder, jpegToTensor, resolveJpegDecoder } from './libjpeg/jpeg-tensor.ts';
import { resizeToTensor } from './nsfwjs-input.ts';
import { type ImagePdq, PDQ_REDUCE_SIDE, pdqOfDownsample, pdqOfFrame } from './pdq.ts';
import { checkImageData } from './probe.ts';
import { jpegStructure } from './probe-jpeg.ts';
import { restrictSharp } from './sharp-restrictions.ts';
import { signatureFormat } from './sniff.ts';
import {
  DEFAULT_DIMENSION_LIMITS,
  type DimensionLimits,
  type ImageFormat,
  limitsOf,
  type ProbedImage,
} from './types.ts';

export type AlphaBackground = 'black' | 'white';

export interface DecodeOptions {
  /**
   * JPEG only: let libjpeg decode at 1/4 or 1/8 scale (never below `targetSize` on the short
   * edge). 1/2 is not used: libjpeg-turbo's 4x4 reduced IDCT has no x86 SIMD, measured slower than a
   * full decode. Much faster on large photos, but the pixels differ from the full-resolution path; keep
   * false until the score drift has been measured (limit: max |Δ nsfw| ≤ 0.01).
   * `'if-declined'` (toModelInput): only if the libjpeg fast path declines the JPEG; the fast path
   * itself decodes at full size holding two rows, so it needs no shrinking to bound memory.
   */
  shrinkOnLoad?: boolean | 'if-declined';
  /** Model input size, used to bound shrink-on-load. Default 224. */
  targetSize?: number;
  /** Background that alpha is flattened onto. Default 'white' (see the header comment). */
  background?: AlphaBackground;
  /** Dimension limits; their pixel limit is repeated as sharp's `limitInputPixels`. */
  limits?: DimensionLimits;
  /** Upper bound on sharp's processing time per image, in seconds (0 = none). Default 30. */
  timeoutSeconds?: number;
  /**
   * toModelInput only: `libjpeg` tries the fast path (libjpeg/jpeg-tensor.c) for JPEGs first; a JPEG it
   * declines goes to sharp. Default: `libjpeg` where the addon was built, else `sharp`.
   */
  jpegDecoder?: JpegDecoder;
  /**
   * toModelInput only: whose input to make, by its family's driver (model/family-drivers.ts). Default:
   * nsfwjs's (nsfwjs-input.ts, or the libjpeg fast path) at `size`. A family the fast path does not
   * serve is decoded by sharp. An ensemble: one decode by sharp, then each member's input from the same
   * pixels, one after another.
   */
  model?: ModelChoice;
  /**
   * toModelInput only: when set, near-uniform margins are trimmed and a long frame is cut into at most
   * this many tiles (frame-layout.ts; MAX_TILES; 1: trimmed, never tiled). Unset: the whole frame, as
   * nsfwjs sees it (what the parity tests compare).
   */
  maxTiles?: number;
  /** decodeRgb only: the frame / page to decode (GIF, WebP, TIFF). Default 0, the first. */
  page?: number;
  /**
   * toModelInput only: frames of an animation or pages of a TIFF to score, at most (frames.ts;
   * MAX_FRAMES_SCORED). Unset or 1: the first frame only (spec).
   */
  maxFramesScored?: number;
  /**
   * toModelInput only: also hash the decoded frame with PDQ (pdq.ts), before any trim or tile; the libjpeg
   * fast path feeds PDQ's filter the rows it reads as it decodes (at full size: it never shrinks on load).
   */
  pdq?: boolean;
}

export interface DecodedRgb {
  /** Interleaved RGB, 8 bits per channel, rows top to bottom, upright (orientation applied). */
  rgb: Uint8Array;
  width: number;
  height: number;
}

export interface ModelInput {
  /**
   * NHWC float32 [1, size, size, 3], RGB in [0, 1] (an ensemble: each member's input in turn). A tiled
   * frame: one such input per tile, one after another (`tiles` of them).
   */
  tensor: Float32Array;
  /** Inputs in `tensor`: 1 unless the frame was cut into tiles (frame-layout.ts) or several frames scored. */
  tiles: number;
  /** Several frames scored (frames.ts): the frame index of each input in `tensor`, in order. */
  inputFrames?: number[];
  size: number;
  /** Size of the decoded (upright, possibly shrunk-on-load) RGB image that was resized. */
  decodedWidth: number;
  decodedHeight: number;
  /** With the libjpeg fast path the resize happens during the decode: all of it is decodeMs. */
  decodeMs: number;
  resizeMs: number;
  /** Which decoder made the pixels; for a JPEG that sharp decoded, why the fast path declined it. */
  decoder: JpegDecoder;
  declined?: string;
  /** The decoded frame's PDQ hash, when asked for (`pdq`). */
  pdq?: ImagePdq;
}

type FailOn = FormatRow['failOn'];

/**
 * libjpeg warnings after which every pixel is still decoded: bytes skipped before a marker, an
 * unknown JFIF version or Adobe transform code, an unreadable ICC marker, ignored SOS parameters.
 */
const BENIGN_JPEG_WARNINGS =
  /extraneous bytes before marker|unknown JFIF revision|unknown Adobe color transform|bad ICC marker|invalid SOS parameters for sequential JPEG/i;

const BACKGROUNDS: Record<AlphaBackground, { r: number; g: number; b: number }> = {
  black: { r: 0, g: 0, b: 0 },
  white: { r: 255, g: 255, b: 255 },
};

function undecodable(format: ImageFormat, err: unknown): ApiError {
  const raw = err instanceof Error ? err.message : String(err);
  const reason = /timeout/i.test(raw)
    ? 'decoding took too long'
    : /premature end|truncat|unexpected end|read error|short read|not enough data/i.test(raw)
      ? 'the data is truncated'
      : 'the data is corrupt or uses an unsupported variant';
  // The decoder's own words travel as `cause`, for logs only (never sent to the client).
  return new ApiError('UNDECODABLE', `Undecodable ${FORMATS[format].name} image: ${reason}`, {}, err);
}

function maxPixelsOf(probed: ProbedImage, opts: DecodeOptions): number {
  const limits = opts.limits ?? DEFAULT_DIMENSION_LIMITS;
  return limitsOf(limits, probed.format).maxPixels;
}

/** What every decoder is handed only after: the sniffed signature again, and enough data for the header. */
function guardDecoderInput(bytes: Buffer, probed: ProbedImage): void {
  // Defence in depth: never hand a decoder bytes that do not carry the whitelisted signature we sniffed.
  if (signatureFormat(bytes) !== probed.format) {
    throw new ApiError(
      'UNSUPPORTED_FORMAT',
      'Unsupported format: content does not match the detected format',
    );
  }
  // Data too short for the size its header claims is refused before a decoder sees it (cheap).
  checkImageData(bytes, probed);
}

/**
 * Decodes the first frame of a sniffed and probed image into upright 8-bit sRGB RGB.
 * Throws ApiError 4005 for anything that fails to decode.
 */
export async function decodeRgb(
  bytes: Buffer,
  probed: ProbedImage,
  opts: DecodeOptions = {},
): Promise<DecodedRgb> {
  restrictSharp();
  const format = probed.format;
  const maxPixels = maxPixelsOf(probed, opts);
  const timeoutSeconds = opts.timeoutSeconds ?? 30;
  guardDecoderInput(bytes, probed);

  const decode = async (failOn: FailOn): Promise<DecodedRgb> => {
    let pipeline: Sharp;
    if (FORMATS[format].decoder === 'bmp.ts') {
      const bmp = decodeBmp(bytes, maxPixels);
      pipeline = sharp(bmp.data, {
        raw: { width: bmp.width, height: bmp.height, channels: bmp.channels },
        limitInputPixels: maxPixels,
      });
    } else {
      pipeline = sharp(bytes, {
        failOn,
        limitInputPixels: maxPixels,
        sequentialRead: true,
        pages: 1,
        page: opts.page ?? 0,
        autoOrient: true,
      });
      if (opts.shrinkOnLoad && format === 'jpeg') {
        const scale = shrinkScale(probed.width, probed.height, opts.targetSize ?? 224);
        if (scale > 1) {
          // 'inside' a square box of the long edge / scale: orientation-independent, and the shrink
          // factor is >= scale, so libjpeg decodes at exactly 1/scale (ceil of each edge); the
          // residual resize to the floor is at most 1 px per edge, done with the cheapest kernel.
          const box = Math.floor(Math.max(probed.width, probed.height) / scale);
          pipeline = pipeline.resize(box, box, { fit: 'inside', fastShrinkOnLoad: true, kernel: 'nearest' });
        }
      }
    }
    pipeline = pipeline
      .flatten({ background: BACKGROUNDS[opts.background ?? 'white'] })
      .toColourspace('srgb')
      .raw({ depth: 'uchar' });
    if (timeoutSeconds > 0) pipeline = pipeline.timeout({ seconds: timeoutSeconds });
    const { data, info } = await pipeline.toBuffer({ resolveWithObject: true });
    if (info.channels !== 3 || data.length !== info.width * info.height * 3) {
      throw new Error(`unexpected decoder output: ${info.width}x${info.height}x${info.channels}`);
    }
    return { rgb: data, width: info.width, height: info.height };
  };

  try {
    try {
      return await decode(FORMATS[format].failOn);
    } catch (err) {
      // A harmless libjpeg warning (e.g. junk between segments, written by some cameras and
      // editors; every pixel is decoded): decode again as 'error' would, and score it.
      if (format === 'jpeg' && err instanceof Error && BENIGN_JPEG_WARNINGS.test(err.message)) {
        return await decode('error');
      }
      throw err;
    }
  } catch (err) {
    if (isApiError(err)) throw err;
    throw undecodable(format, err);
  }
}

/** Largest JPEG DCT scale (8, 4) that keeps the short edge at or above `target`; 1 if none. */
export function shrinkScale(width: number, height: number, target: number): number {
  for (const s of [8, 4]) if (Math.floor(Math.min(width, height) / s) >= target) return s;
  return 1;
}

/**
 * The model input for a sniffed and probed image: decode (first frame, upright, sRGB, alpha
 * flattened) then the nsfwjs resize. Throws ApiError 4005 if the image does not decode.
 */
export async function toModelInput(
  bytes: Buffer,
  probed: ProbedImage,
  size: number,
  opts: DecodeOptions = {},
): Promise<ModelInput> {
  const t0 = performance.now();
  let declined: string | undefined;
  const members = opts.model ? modelMembers(opts.model) : [];
  const { maxTiles } = opts;
  const laidOut = maxTiles !== undefined;
  if (probed.frames > 1 && (opts.maxFramesScored ?? 1) > 1) {
    const indices = framesToScore(
      bytes,
      probed,
      opts.maxFramesScored ?? 1,
      opts.limits ?? DEFAULT_DIMENSION_LIMITS,
    );
    if (indices.length > 1) return framesToModelInput(bytes, probed, size, indices, opts, t0);
  }
  if (
    probed.format === 'jpeg' &&
    jpegFastPathServes(members) &&
    !(laidOut && isLongBox(probed)) &&
    opts.shrinkOnLoad !== true &&
    (opts.jpegDecoder ?? DEFAULT_JPEG_DECODER()) === 'libjpeg'
  ) {
    guardDecoderInput(bytes, probed);
    // The fast path would read the whole file before declining these (jpeg-decode.c): not tried.
    const fast = jpegStructure(bytes).coefficientsComplete
      ? jpegToTensor(bytes, size, maxPixelsOf(probed, opts), opts.pdq ? PDQ_REDUCE_SIDE : undefined)
      : 'progressive coefficients incomplete';
    if (typeof fast === 'string') declined = fast;
    // The fast path resizes the whole frame: a frame that shows margins in its input is decoded by
    // sharp, where they are measured on every pixel (and trimmed).
    else if (laidOut && showsMargins(fast.tensor, size)) declined = 'uniform margins';
    else {
      return {
        tensor: fast.tensor,
        tiles: 1,
        size,
        decodedWidth: fast.width,
        decodedHeight: fast.height,
        decodeMs: performance.now() - t0,
        resizeMs: 0,
        decoder: 'libjpeg',
        ...(fast.pdq === undefined ? {} : { pdq: pdqOfDownsample(fast.pdq, fast.width, fast.height) }),
      };
    }
  } else if (probed.format === 'jpeg' && laidOut && isLongBox(probed)) {
    declined = 'a long frame is tiled';
  }
  const targetSize = Math.max(size, ...members.map((m) => resizeTargetOf(m)));
  const decoded = await decodeRgb(bytes, probed, { targetSize, ...opts });
  const pdq = opts.pdq ? pdqOfFrame(decoded.rgb, decoded.width, decoded.height) : undefined;
  const t1 = performance.now();
  const { tensor, inputs } = await inputsOfFrame(decoded, size, opts);
  const t2 = performance.now();
  return {
    tensor,
    tiles: inputs,
    size,
    decodedWidth: decoded.width,
    decodedHeight: decoded.height,
    decodeMs: t1 - t0,
    resizeMs: t2 - t1,
    decoder: 'sharp',
    ...(declined === undefined ? {} : { declined }),
    ...(pdq === undefined ? {} : { pdq }),
  };
}

const DEFAULT_JPEG_DECODER = (): JpegDecoder => resolveJpegDecoder('auto');

/**
 * The model inputs of one decoded frame, one after another: the whole frame as nsfwjs sees it, or, with
 * `maxTiles`, the boxes frameLayout picks (its content, tiles of a strip), each model's input of each.
 */
async function inputsOfFrame(
  decoded: DecodedRgb,
  size: number,
  opts: DecodeOptions,
): Promise<{ tensor: Float32Array; inputs: number }> {
  const members = opts.model ? modelMembers(opts.model) : [];
  const boxes =
    opts.maxTiles !== undefined
      ? frameLayout(decoded.rgb, decoded.width, decoded.height, opts.maxTiles)
      : [{ left: 0, top: 0, width: decoded.width, height: decoded.height }];
  const inputOf = (d: DecodedRgb): Promise<Float32Array> | Float32Array =>
    members.length === 0 ? resizeToTensor(d.rgb, d.width, d.height, size) : inputOfMembers(d, members);
  const tensor = isWholeFrame(boxes, decoded.width, decoded.height)
    ? await inputOf(decoded)
    : concat(
        await Promise.all(
          boxes.map((box) =>
            inputOf({ rgb: cropRgb(decoded.rgb, decoded.width, box), width: box.width, height: box.height }),
          ),
        ),
      );
  return { tensor, inputs: boxes.length };
}

/**
 * Model inputs all the frames scored of one image may make together, at most (MAX_TILES each, fewer
 * when MAX_FRAMES_SCORED × MAX_TILES is more): 64 of mobilenet_v2 hold 37 MiB.
 */
export const MAX_INPUTS_OF_FRAMES = 64;

/**
 * Several frames of an animation or pages of a TIFF (frames.ts), each decoded, laid out and made into
 * inputs as a still frame is, one frame at a time (one frame's pixels held at once); `inputFrames`
 * says which frame each input came from.
 */
async function framesToModelInput(
  bytes: Buffer,
  probed: ProbedImage,
  size: number,
  indices: readonly number[],
  opts: DecodeOptions,
  t0: number,
): Promise<ModelInput> {
  const parts: Float32Array[] = [];
  const inputFrames: number[] = [];
  // Boxes per frame shared out so that the frames together stay within MAX_INPUTS_OF_FRAMES inputs.
  const perFrame =
    opts.maxTiles === undefined
      ? undefined
      : Math.max(1, Math.min(opts.maxTiles, Math.floor(MAX_INPUTS_OF_FRAMES / indices.length)));
  const frameOpts = perFrame === undefined ? opts : { ...opts, maxTiles: perFrame };
  let decodeMs = 0;
  let resizeMs = 0;
  const add = async (index: number, decoded: DecodedRgb, decodedAt: number): Promise<void> => {
    const t1 = performance.now();
    decodeMs += t1 - decodedAt;
    const { tensor, inputs } = await inputsOfFrame(decoded, size, frameOpts);
    parts.push(tensor);
    for (let k = 0; k < inputs; k++) inputFrames.push(index);
    resizeMs += performance.now() - t1;
  };
  let first: DecodedRgb | undefined;
  if (FORMATS[probed.format].frames === 'apng') {
    guardDecoderInput(bytes, probed);
    let at = t0;
    try {
      for await (const frame of apngFrames(bytes, indices, opts.timeoutSeconds ?? 30)) {
        const decoded = await flattenRgba(frame.rgba, frame.width, frame.height, opts.background ?? 'white');
        first ??= decoded;
        await add(frame.index, decoded, at);
        at = performance.now();
      }
    } catch (err) {
      if (isApiError(err)) throw err;
      throw undecodable(probed.format, err);
    }
  } else {
    for (const index of indices) {
      const at = performance.now();
      const decoded = await decodeRgb(bytes, probed, { ...opts, page: index });
      first ??= decoded;
      await add(index, decoded, at);
    }
  }
  return {
    tensor: concat(parts),
    tiles: inputFrames.length,
    inputFrames,
    size,
    decodedWidth: first?.width ?? probed.width,
    decodedHeight: first?.height ?? probed.height,
    decodeMs,
    resizeMs,
    decoder: 'sharp',
  };
}

/** RGBA (an APNG frame) flattened onto the alpha background as decodeRgb does, to 8-bit RGB. */
async function flattenRgba(
  rgba: Uint8Array,
  width: number,
  height: number,
  background: AlphaBackground,
): Promise<DecodedRgb> {
  const { data } = await sharp(rgba, { raw: { width, height, channels: 4 } })
    .flatten({ background: BACKGROUNDS[background] })
    .raw({ depth: 'uchar' })
    .toBuffer({ resolveWithObject: true });
  return { rgb: data, width, height };
}

/** The size a model's preprocessing resizes to (what shrink-on-load must not go below). */
const resizeTargetOf = (model: ModelName): number => driverOf(model).resizeTarget(model);

/** Each model's input from the same decoded pixels, one after another in one buffer. */
async function inputOfMembers(decoded: DecodedRgb, members: readonly ModelName[]): Promise<Float32Array> {
  const { rgb, width, height } = decoded;
  const parts: Float32Array[] = [];
  for (const m of members) parts.push(await driverOf(m).input(rgb, width, height, m));
  return concat(parts);
}

function concat(parts: readonly Float32Array[]): Float32Array {
  if (parts.length === 1) return parts[0] as Float32Array;
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

/**
 * Whether the first or last row or column of a fast-path input is flat as contentBox judges a line
 * (isFlatLine, on the 8-bit values it would see): if none is, contentBox peels no margin, and the whole
 * input need not be converted and walked.
 */
function anEdgeIsFlat(tensor: Float32Array, size: number): boolean {
  const line = new Uint8Array(size * 3);
  const flat = (start: number, step: number) => {
    for (let k = 0; k < size; k++)
      for (let c = 0; c < 3; c++)
        line[k * 3 + c] = Math.round((tensor[start + k * step + c] as number) * 255);
    return isFlatLine(line, 0, 3, size);
  };
  return (
    flat(0, 3) || // top row
    flat((size - 1) * size * 3, 3) || // bottom row
    flat(0, size * 3) || // left column
    flat((size - 1) * 3, size * 3) // right column
  );
}

/**
 * Whether a fast-path input (NHWC [1, size, size, 3] in [0, 1]) shows a uniform margin: bilinear
 * resizing keeps a uniform run uniform, so a margin of the frame shows as one of the input at the
 * same share of its edge (less a line of interpolation at its border). Half the share is asked for.
 */
function showsMargins(tensor: Float32Array, size: number): boolean {
  // A margin starts at an edge: with no edge line uniform (most photos) there is none, and the whole
  // input need not be converted and walked.
  if (!anEdgeIsFlat(tensor, size)) return false;
  const rgb = new Uint8Array(size * size * 3);
  for (let i = 0; i < rgb.length; i++) rgb[i] = Math.round((tensor[i] as number) * 255);
  const box = contentBox(rgb, size, size, undefined, MIN_MARGIN_FRACTION / 2);
  return box.width !== size || box.height !== size;
}
