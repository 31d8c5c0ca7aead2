// Where an image is decoded, from its header alone: in the scoring worker thread that infers it
// ('in-process': no process hop, no second runtime), or in a decoder process ('isolated': killed alone
// at its CPU limit or deadline, its memory given back at once). A decode in a worker thread cannot be
// stopped — terminating a thread inside libjpeg or libvips does not end it, and terminating one beside
// an ONNX session aborts the server — so only images whose cost the header bounds tightly, and which
// nothing in them marks as unusual, take that path: a few megapixels, a file no larger than its
// pixels, few scans, few frames. Anything else, hostile or merely large, is isolated.
// docs/isolation-and-charging.md ("Which path") states the rule with the figures behind it.

import { predictedDecodeMs } from '../image/image-cost.ts';
import { jpegStructure, PROGRESSIVE_SOF } from '../image/probe-jpeg.ts';
import type { ProbedImage } from '../image/types.ts';

export type DecodePath = 'in-process' | 'isolated';

/** The header facts the route reads (probeHeader has read them all already). */
export interface DecodeFacts extends ProbedImage {
  byteLength: number;
  /** JPEG only: from the marker walk the probe made (jpegStructure, cached per buffer). */
  jpeg?: {
    progressive: boolean;
    scans: number;
    components: number;
    /** 8×8 blocks the scans walk together. */
    scanBlocks: number;
    metadataBytes: number;
    coefficientsComplete: boolean;
  };
}

export interface DecodeRoute {
  path: DecodePath;
  /** Why, for logs and tests: 'ordinary', or the first bound the image is over. */
  reason: string;
}

export interface InProcessBounds {
  /** Pixels of the first frame (IN_PROCESS_MAX_PIXELS). */
  maxPixels: number;
  /**
   * Frames scored of an animation (MAX_FRAMES_SCORED; default 1): past one, an animation decodes
   * several frames (image/frames.ts), a cost the first frame's header does not bound: isolated.
   */
  maxFramesScored?: number;
}

/**
 * The file may be larger than its pixels as 8-bit RGBA by this much (ICC profile, EXIF, a thumbnail):
 * an image file larger than that carries something other than its picture (metadata, empty chunks,
 * frames), which its decoder walks.
 */
export const IN_PROCESS_SLACK_BYTES = 256 * 1024;

/** Larger files are isolated whatever their pixels: inflating 16 MiB of PNG takes ~50 ms. */
export const IN_PROCESS_MAX_BYTES = 16 * 1024 * 1024;

/**
 * JPEG scans: libjpeg's progressive default writes 10 (YCbCr), 6 (grey); mozjpeg's optimised scripts
 * about as many. More is a hand-made script (up to MAX_JPEG_SCANS pass the probe).
 */
export const IN_PROCESS_MAX_JPEG_SCANS = 12;

/**
 * Blocks the scans of a JPEG walk together: a 10-scan progressive 8 MP 4:4:4 photo walks ~2.2 M, a
 * 4:2:0 one ~1.1 M. At the ~42 ns a block measured for the costliest scans that pass the probe (issue
 * 48's 14142² grey one), 4 M blocks is ~0.2 s of CPU: the longest a worker thread is held.
 */
export const IN_PROCESS_MAX_SCAN_BLOCKS = 4 * 1024 * 1024;

/** JPEG metadata (APPn, COM): an ICC profile and EXIF with its thumbnail stay far below. */
export const IN_PROCESS_MAX_JPEG_METADATA_BYTES = 1024 * 1024;

/**
 * Frames or pages of GIF, WebP and TIFF: each decoder walks every one, even for the first alone (an
 * animated WebP at the square of their count: 256 frames ~0.3 ms).
 */
export const IN_PROCESS_MAX_FRAMES = 256;

/**
 * The predicted decode (image-cost.ts, which errs high: rates of the slowest CPU measured) past which an
 * image is isolated whatever else its header says: an 8 MP photo is predicted at ~0.2–0.3 s there.
 */
export const IN_PROCESS_MAX_PREDICTED_DECODE_MS = 500;

/** The header facts of `bytes` (probed as `probed`): JPEG's from the probe's cached marker walk. */
export function decodeFacts(bytes: Uint8Array, probed: ProbedImage): DecodeFacts {
  const facts: DecodeFacts = { ...probed, byteLength: bytes.byteLength };
  if (probed.format !== 'jpeg') return facts;
  const s = jpegStructure(bytes);
  facts.jpeg = {
    progressive: PROGRESSIVE_SOF.has(s.marker),
    scans: s.scans,
    components: s.components.length,
    scanBlocks: s.scanBlocks,
    metadataBytes: s.metadataBytes,
    coefficientsComplete: s.coefficientsComplete,
  };
  return facts;
}

const isolated = (reason: string): DecodeRoute => ({ path: 'isolated', reason });

/** In-process for an ordinary image within `bounds`; isolated, with the first bound it is over, otherwise. */
export function decodeRoute(facts: DecodeFacts, bounds: InProcessBounds): DecodeRoute {
  const pixels = facts.width * facts.height;
  if (pixels > bounds.maxPixels) return isolated(`${pixels} pixels, over ${bounds.maxPixels}`);
  if (facts.byteLength > IN_PROCESS_MAX_BYTES)
    return isolated(`${facts.byteLength} bytes, over ${IN_PROCESS_MAX_BYTES}`);
  if (facts.byteLength > pixels * 4 + IN_PROCESS_SLACK_BYTES)
    return isolated(`${facts.byteLength} bytes for ${pixels} pixels: more than its pixels`);
  if (facts.frames > IN_PROCESS_MAX_FRAMES)
    return isolated(`${facts.frames} frames, over ${IN_PROCESS_MAX_FRAMES}`);
  const decodeMs = predictedDecodeMs({
    format: facts.format,
    width: facts.width,
    height: facts.height,
    frames: facts.frames,
    bytes: facts.byteLength,
    ...(facts.jpeg && { scanBlocks: facts.jpeg.scanBlocks }),
    tiles: 1,
  });
  if (decodeMs > IN_PROCESS_MAX_PREDICTED_DECODE_MS)
    return isolated(
      `a decode predicted at ${Math.round(decodeMs)} ms, over ${IN_PROCESS_MAX_PREDICTED_DECODE_MS}`,
    );
  if (facts.frames > 1 && (bounds.maxFramesScored ?? 1) > 1)
    return isolated(`${facts.frames} frames, several of them scored`);
  const jpeg = facts.jpeg;
  if (facts.format === 'jpeg') {
    if (!jpeg) return isolated('JPEG structure unknown');
    // CMYK/YCCK: rare in uploads, colour-converted through its profile by libvips.
    if (jpeg.components === 4) return isolated('4 components (CMYK)');
    if (jpeg.scans > IN_PROCESS_MAX_JPEG_SCANS)
      return isolated(`${jpeg.scans} scans, over ${IN_PROCESS_MAX_JPEG_SCANS}`);
    if (jpeg.scanBlocks > IN_PROCESS_MAX_SCAN_BLOCKS)
      return isolated(`its scans walk ${jpeg.scanBlocks} blocks, over ${IN_PROCESS_MAX_SCAN_BLOCKS}`);
    if (jpeg.metadataBytes > IN_PROCESS_MAX_JPEG_METADATA_BYTES)
      return isolated(`${jpeg.metadataBytes} bytes of metadata, over ${IN_PROCESS_MAX_JPEG_METADATA_BYTES}`);
    // Block smoothing of incomplete coefficients: no encoder stops a script early.
    if (!jpeg.coefficientsComplete) return isolated('progressive scans leave coefficients incomplete');
  }
  return { path: 'in-process', reason: 'ordinary' };
}
