// The GIF header: the logical screen extended by every frame rectangle, and the frames, walking the
// blocks without decompressing them.

import { MAX_GIF_BLOCKS } from './image-cost.ts';
import { Bytes, type Dims, HeaderError, type Walk, WalkBoundError, WalkCache } from './probe-bytes.ts';

/** Blocks walked so far, for MAX_GIF_BLOCKS. */
interface Walked {
  blocks: number;
}

function countBlock(walked: Walked): void {
  if (++walked.blocks > MAX_GIF_BLOCKS)
    throw new WalkBoundError(`over ${MAX_GIF_BLOCKS} blocks (no real file has so many)`);
}

/** Frames walked between two pauses of the walk. */
const FRAME_SLICE = 2_048;

/** Skips a chain of GIF data sub-blocks; returns the offset after the terminator, or -1 if truncated. */
function skipSubBlocks(r: Bytes, start: number, walked: Walked): number {
  let p = start;
  while (p < r.length) {
    countBlock(walked);
    const size = r.b[p] ?? 0;
    p += 1 + size;
    if (size === 0) return p;
  }
  return -1;
}

export function probeGif(r: Bytes): Dims {
  return gifWalks.get(r.b);
}

/** The walk of a GIF in slices (probe.ts walkHeader), so that it does not hold the event loop. */
export const gifWalk = (bytes: Uint8Array): Walk<Error | undefined> => gifWalks.prefill(bytes);

function* walkGif(bytes: Uint8Array): Walk<Dims> {
  const r = new Bytes(bytes);
  r.need(0, 13, 'logical screen descriptor');
  const screenWidth = r.u16le(6);
  const screenHeight = r.u16le(8);
  const packed = r.u8(10);
  let p = 13 + (packed & 0x80 ? 3 * (2 << (packed & 7)) : 0);
  // The decoder (libnsgif) grows its canvas to hold every frame, so the size we check and report
  // is the logical screen extended by every frame rectangle.
  let width = screenWidth;
  let height = screenHeight;
  let frames = 0;
  const walked: Walked = { blocks: 0 };
  while (p < r.length) {
    countBlock(walked);
    const introducer = r.u8(p);
    p += 1;
    if (introducer === 0x3b) break; // trailer
    if (introducer === 0x21) {
      // Extension: label byte, then sub-blocks.
      const end = skipSubBlocks(r, p + 1, walked);
      if (end < 0) break;
      p = end;
      continue;
    }
    if (introducer !== 0x2c) break; // unknown block: the decoder stops here as well
    if (!r.has(p, 9)) {
      if (frames === 0) throw new HeaderError('truncated before the first image descriptor');
      break;
    }
    const left = r.u16le(p);
    const top = r.u16le(p + 2);
    const frameWidth = r.u16le(p + 4);
    const frameHeight = r.u16le(p + 6);
    const framePacked = r.u8(p + 8);
    p += 9;
    if (framePacked & 0x80) p += 3 * (2 << (framePacked & 7));
    p += 1; // LZW minimum code size
    const end = skipSubBlocks(r, p, walked);
    if (end < 0) {
      // A cut-off later frame is tolerated (the frames before it are intact); a cut-off first frame is not.
      if (frames === 0) throw new HeaderError('truncated inside the first frame');
      break;
    }
    p = end;
    frames += 1;
    if (frames % FRAME_SLICE === 0) yield;
    if (frameWidth > 0 && frameHeight > 0) {
      width = Math.max(width, left + frameWidth);
      height = Math.max(height, top + frameHeight);
    }
  }
  if (frames === 0) throw new HeaderError('no image data');
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames };
}

const gifWalks = new WalkCache(walkGif);
