// The bounds on what one image may cost to decode, checked from its header before any pixel is
// decoded (probe.ts) and by the fast path (libjpeg/jpeg-tensor.ts). docs/image-cost.md states them with
// the CPU time and memory they allow. (Plain TypeScript: the fast path's child processes load it with
// Node's type stripping.)

/**
 * More scans than any encoder writes: libjpeg's progressive default writes 10 (YCbCr) or 6 (grey), 18
 * for CMYK (2 + 4 a component); mozjpeg's scan search picks from 64 candidates; jpegtran's scan
 * scripts stop at 100. Each scan is a pass over every block of its components, so a script of one
 * coefficient per scan and every refinement (883 scans grey, 2,647 colour) multiplies the decode time.
 */
export const MAX_JPEG_SCANS = 100;

/**
 * The most 8×8 blocks the scans of one JPEG may walk together: 2^27, i.e. 43 passes over one component
 * of the largest allowed image (200 MP: 3.1 M blocks). The largest CMYK progressive JPEG libjpeg writes
 * (18 scans, 24 component passes) walks 75 M; a 10-scan 4:4:4 colour one 37.5 M. docs/image-cost.md
 * gives what a block costs (CPU) and so the bound per image.
 */
export const MAX_JPEG_SCAN_BLOCKS = 2 ** 27;

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
