// The native addon (jpeg-tensor.c): the JPEG fast path — libjpeg-turbo decodes and the nsfwjs resize
// samples rows as they arrive, bit-identical to sharp + resizeToTensor for the JPEGs it takes, with PDQ's
// filter fed the same rows — and PDQ's filter for frames sharp decoded. The addon is built by build.ts
// (`npm install` runs it); where it could not be built, every JPEG goes through sharp and PDQ through
// pdq.ts's filter.

import { createRequire } from 'node:module';
import { SETTINGS } from '../../../../lib/common/settings.ts';
import { MAX_JPEG_SCANS } from '../image-cost.ts';

/** JPEG_DECODER: `auto` uses the fast path when it was built; `libjpeg` requires it; `sharp` never uses it. */
export const JPEG_DECODERS = SETTINGS.JPEG_DECODER.values;
export type JpegDecoderChoice = (typeof JPEG_DECODERS)[number];
export type JpegDecoder = 'libjpeg' | 'sharp';

export interface JpegTensor {
  /** NHWC float32 [1, size, size, 3] in [0, 1]. */
  tensor: Float32Array;
  width: number;
  height: number;
  /** PDQ's 64×64 downsample of the whole decoded image (after pdq.ts's pdqReduce), when asked for. */
  pdq?: Float32Array;
}

interface Addon {
  decodeToTensor(
    bytes: Uint8Array,
    size: number,
    maxPixels: number,
    maxScans: number,
    pdqReduceSide: number,
  ): JpegTensor | string;
  pdqDownsample(rgb: Uint8Array, width: number, height: number, reduceSide: number): Float32Array;
}

const INSTALL_HINT =
  'build it with `npm run build:native` (needs: apt-get install gcc libc6-dev libjpeg62-turbo-dev)';

let loaded: { addon: Addon } | { error: string } | undefined;

function load(): { addon: Addon } | { error: string } {
  if (!loaded) {
    try {
      loaded = { addon: createRequire(import.meta.url)('./build/jpeg-tensor.node') as Addon };
    } catch (err) {
      const message = err instanceof Error ? err.message.split('\n')[0] : String(err);
      loaded = { error: `the libjpeg fast path is not available (${message}); ${INSTALL_HINT}` };
    }
  }
  return loaded;
}

/** Why the fast path cannot be used, or undefined when it can. */
export function libjpegUnavailable(): string | undefined {
  const state = load();
  return 'error' in state ? state.error : undefined;
}

/**
 * The decoder a JPEG_DECODER choice means on this machine. Throws for `libjpeg` when the addon is not
 * built (configuration fails fast at boot); `auto` quietly means `sharp` then (the caller logs why).
 */
export function resolveJpegDecoder(choice: JpegDecoderChoice): JpegDecoder {
  if (choice === 'sharp') return 'sharp';
  const missing = libjpegUnavailable();
  if (!missing) return 'libjpeg';
  if (choice === 'libjpeg') throw new Error(`JPEG_DECODER=libjpeg: ${missing}`);
  return 'sharp';
}

/**
 * The model input of a JPEG straight from libjpeg-turbo (with `pdqReduceSide`, also PDQ's downsample of
 * the decoded frame, a large one averaged over blocks first: pdq.ts's pdqReduce, 0: never), or why it was
 * declined (CMYK, ICC profile, EXIF rotation, any libjpeg warning or error, ...): the caller then decodes
 * with sharp.
 */
export function jpegToTensor(
  bytes: Uint8Array,
  size: number,
  maxPixels: number,
  pdqReduceSide?: number,
): JpegTensor | string {
  const state = load();
  if ('error' in state) return state.error;
  return state.addon.decodeToTensor(bytes, size, maxPixels, MAX_JPEG_SCANS, pdqReduceSide ?? -1);
}

/**
 * PDQ's 64×64 downsample of interleaved 8-bit RGB by the addon, a large image averaged over blocks first
 * (pdq.ts's pdqReduce; `reduceSide` 0: never); undefined where the addon is not built.
 */
export function pdqDownsample(
  rgb: Uint8Array,
  width: number,
  height: number,
  reduceSide: number,
): Float32Array | undefined {
  const state = load();
  return 'error' in state ? undefined : state.addon.pdqDownsample(rgb, width, height, reduceSide);
}
