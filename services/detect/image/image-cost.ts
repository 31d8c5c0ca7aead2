// The bounds on what one image may cost to decode, checked from its header before any pixel is
// decoded (probe.ts) and by the fast path (libjpeg/jpeg-tensor.ts). docs/image-cost.md states them with
// the CPU time and memory they allow. (Plain TypeScript: the fast path's child processes load it with
// Node's type stripping.)

import type { ImageFormat } from '../../../lib/common/image-formats.ts';
import { MODEL_NAMES, MODELS, type ModelName } from '../../../lib/common/model-catalogue.ts';

/**
 * More scans than any encoder writes: libjpeg's progressive default writes 10 (YCbCr) or 6 (grey), 18
 * for CMYK (2 + 4 a component); mozjpeg's scan search picks from 64 candidates; jpegtran's scan
 * scripts stop at 100. Each scan is a pass over every block of its components, so a script of one
 * coefficient per scan and every refinement (883 scans grey, 2,647 colour) multiplies the decode time.
 */
export const MAX_JPEG_SCANS = 100;

/**
 * The most 8×8 blocks the scans of one JPEG may walk together: 80 M, i.e. 25 passes over one component
 * of the largest allowed image (200 MP: 3.1 M blocks). The largest CMYK progressive JPEG libjpeg writes
 * (18 scans, 24 component passes) walks 75 M; a 10-scan 4:4:4 colour one of 196 MP 43 M. A block visit
 * costs ~17–21 ns of CPU on an AMD EPYC, ~43 ns on the Intel Xeon the issue measured: the bound's worst
 * case is ~1.6 s / ~3.4 s, well inside the 6 s DECODE_CPU_LIMIT_MS (docs/image-cost.md).
 */
export const MAX_JPEG_SCAN_BLOCKS = 80_000_000;

/** Components a JPEG may have: greyscale, YCbCr/RGB, CMYK/YCCK (each costs 2 bytes a pixel of coefficients). */
export const JPEG_COMPONENT_COUNTS: ReadonlySet<number> = new Set([1, 3, 4]);

/** Every image's fixed share of the decode budget: the model input, decoder bookkeeping, libvips's buffers. */
export const PER_IMAGE_BYTES = 16 * 1024 * 1024;

/** Memory per byte of JPEG APPn/COM segments: libjpeg's saved copy, libvips's blobs (measured ≤ 2.4). */
export const JPEG_METADATA_FACTOR = 3;

/** Memory per byte of PNG ancillary chunks: libspng's copy, libvips's strings (measured ≤ 6.0). */
export const PNG_ANCILLARY_FACTOR = 8;

/**
 * JPEGs over this many pixels are shrunk on load when sharp decodes them. Full-resolution decoding
 * reproduces nsfwjs (max |Δ nsfw| 2.5e-6 over the corpus); libjpeg's DCT shrink-on-load drifts up to
 * 0.017, over the 0.01 parity bound, so it is not used for speed. It is used where a full decode by
 * sharp would cost too much memory (a 200 MP JPEG decodes to ~600 MB of RGB): for JPEGs over this size
 * that the libjpeg fast path declines (it holds only two rows). The scorer decides by it
 * (needsShrinkOnLoad), the decode-memory estimate counts by it.
 */
export const SHRINK_ON_LOAD_ABOVE_PIXELS = 16_000_000;

/**
 * The largest decode-memory estimate (decode-memory.ts) of any image within the JPEG limits and the
 * file size: a progressive JPEG of four components, each at full resolution (2 bytes of coefficients a
 * pixel each, blocks padded to whole 8×8: at most pixels/64 + (width + height)/8 + 1 blocks), its output
 * shrunk on load, every byte of the file counted as metadata. Non-JPEG images stay far below it (36 MP
 * 16-bit RGBA PNG with 50 MB of text: ~870 MB). The default decode budget is this, so that the worst
 * allowed image is admitted alone (docs/image-cost.md).
 */
export function worstJpegDecodeBytes(
  limits: { maxEdge: number; maxPixels: number },
  maxFileBytes: number,
): number {
  const { maxEdge, maxPixels } = limits;
  const edges = maxEdge + Math.min(maxEdge, Math.floor(maxPixels / maxEdge));
  const blocks = Math.ceil(maxPixels / 64 + edges / 8 + 1);
  const coefficients = 4 * blocks * 64 * 2;
  const output = maxPixels > SHRINK_ON_LOAD_ABOVE_PIXELS ? Math.ceil(maxPixels / 64) * 4 * 2 : maxPixels * 4;
  return coefficients + output + maxFileBytes * JPEG_METADATA_FACTOR + PER_IMAGE_BYTES;
}

/** Memory per GIF frame: libnsgif keeps a record of every frame it finds (measured 76 bytes). */
export const GIF_FRAME_BYTES = 128;

/**
 * Frames of an animated WebP: libvips's loader costs the square of the frame count, even for the first
 * frame alone (measured: 5,000 frames 0.13 s of CPU, 20,000 frames 1.9 s, 941,000 frames not done after
 * minutes). 16,384 frames (~1.3 s) is over nine minutes of animation at 30 frames a second.
 */
export const MAX_WEBP_FRAMES = 16_384;

/** Memory per TIFF page: libtiff reads every directory of the file (measured ~230 bytes). */
export const TIFF_PAGE_BYTES = 256;

// ------------------------------------------------------------------------------------ header walks

/**
 * The most marker segments a JPEG header walk visits (every APPn, COM, DQT, DHT, SOS… segment): a real
 * file has tens, a progressive one of 100 scans a few hundred, a 50 MB one of 64 KB metadata segments
 * ~800. Past it: 4005 (12.8 M empty COM segments fit in 51 MB and cost ~0.5 s of walk).
 */
export const MAX_JPEG_SEGMENTS = 8_192;

/**
 * The most chunks a PNG header walk visits: a 50 MB PNG of 8 KB IDAT chunks has 6,400, of 256-byte ones
 * 200,000. Past it: 4005 (4.3 M empty chunks fit in 51 MB and cost 0.4–0.6 s of walk).
 */
export const MAX_PNG_CHUNKS = 262_144;

/**
 * The most blocks (extensions, frames, data sub-blocks) a GIF header walk visits: 3,000,000 one-pixel
 * frames walk 9 M. Past it: 4005.
 */
export const MAX_GIF_BLOCKS = 16_777_216;

/** The most chunks a WebP header walk visits: four times the frames allowed. Past it: 4005. */
export const MAX_WEBP_CHUNKS = 4 * MAX_WEBP_FRAMES;

// ------------------------------------------------------------------------------------ predicted cost

/** What the header says an image will cost to decode and score (probe.ts gathers it). */
export interface CostFacts {
  format: ImageFormat;
  width: number;
  height: number;
  /** Frames (GIF, animated WebP) or pages (TIFF) the decoder walks. */
  frames: number;
  /** File length. */
  bytes: number;
  /** JPEG: the 8×8 blocks its scans walk together. */
  scanBlocks?: number;
  /** Model inputs the frame is scored as, at most (a long frame's tiles: frame-layout.ts). */
  tiles: number;
  /** Frames scored (MAX_FRAMES_SCORED over an animation: image/frames.ts); 1 when absent. */
  framesScored?: number;
  /** Pixels decoded for those frames (frames.ts pixelsToDecode); the first frame's when absent. */
  decodedPixels?: number;
}

/**
 * CPU time of one decode, per unit, on the slowest CPU measured (docs/image-cost.md, "Predicted cost"):
 * the Intel Xeon VM the issue measured on (the AMD EPYC of this round is 1.5–2× faster). Rates are
 * those of the costliest image of each kind measured, so that an estimate errs high.
 */
export const DECODE_NS = {
  /** Fixed: a process hand-over, libvips setup, the resize to the model input. */
  fixedMs: 5,
  /** JPEG: a block visit of a scan (Huffman decoding and, once, the IDCT). */
  jpegBlock: 45,
  /** JPEG: entropy-coded bytes (a q100 file's cost is in its bytes). */
  jpegByte: 40,
  /** JPEG: colour conversion, upsampling and the shrink, per pixel (196 MP 4:4:4 progressive: 3.8 s). */
  jpegPixel: 10,
  /** Per pixel of the other formats (36 MP 16-bit PNG ~14 ns here, TIFF RGBA ~25 ns on the Xeon). */
  pixel: { png: 26, gif: 12, webp: 20, bmp: 15, tiff: 26 } satisfies Record<
    Exclude<ImageFormat, 'jpeg'>,
    number
  >,
  /** Per byte of a non-JPEG file (inflating a PNG, LZW). */
  byte: 10,
  /** Per frame or page the decoder walks (GIF 3 M frames ~1 s; TIFF 65,535 pages ~1.4 s). */
  frame: { gif: 340, tiff: 22_000 } as Record<string, number>,
  /** Animated WebP: libvips's loader costs the square of the frame count (20,000 frames ~1.9 s). */
  webpFrameSquared: 5,
} as const;

/** A name no row holds (none reaches here: MODEL is checked at boot) counts as the costliest model. */
const COSTLIEST_INFERENCE_MS = Math.max(...MODEL_NAMES.map((m) => MODELS[m].inferenceMs));
const inferenceMsOf = (model: string): number =>
  Object.hasOwn(MODELS, model) ? MODELS[model as ModelName].inferenceMs : COSTLIEST_INFERENCE_MS;

/** The models of a choice ("a" or "a+b"). */
const modelsOf = (model: string): string[] => model.split('+');

/** Predicted CPU time of decoding one image, in ms. */
export function predictedDecodeMs(facts: CostFacts): number {
  const pixels = facts.width * facts.height;
  let ns: number;
  if (facts.format === 'jpeg') {
    ns =
      (facts.scanBlocks ?? Math.ceil(pixels / 64) * 3) * DECODE_NS.jpegBlock +
      facts.bytes * DECODE_NS.jpegByte +
      pixels * DECODE_NS.jpegPixel;
  } else {
    ns = (facts.decodedPixels ?? pixels) * DECODE_NS.pixel[facts.format] + facts.bytes * DECODE_NS.byte;
    ns += facts.frames * (DECODE_NS.frame[facts.format] ?? 0);
    if (facts.format === 'webp' && facts.frames > 1) ns += facts.frames ** 2 * DECODE_NS.webpFrameSquared;
  }
  return DECODE_NS.fixedMs + ns / 1e6;
}

/** Predicted CPU time of inference: each tile of each frame scored by each model of the choice, in ms. */
export function predictedInferenceMs(
  facts: Pick<CostFacts, 'tiles' | 'framesScored'>,
  model: string,
): number {
  const perTile = modelsOf(model).reduce((sum, m) => sum + inferenceMsOf(m), 0);
  return facts.tiles * (facts.framesScored ?? 1) * perTile;
}

/**
 * Predicted CPU time of one request's work (decode and inference, one core), in ms, from its header:
 * what the work gate orders its queue by, what admission refuses past the deadline, what the answer's
 * X-Image-Cost header states.
 */
export function predictedCpuMs(facts: CostFacts, model: string): number {
  return Math.ceil(predictedDecodeMs(facts) + predictedInferenceMs(facts, model));
}

/** The work a request costs, as the X-Image-Cost header states it (docs/image-cost.md). */
export function imageCostHeader(facts: CostFacts, model: string): string {
  return `cpu-ms=${predictedCpuMs(facts, model)}; tiles=${facts.tiles}; frames=${facts.frames}; models=${modelsOf(model).length}`;
}
