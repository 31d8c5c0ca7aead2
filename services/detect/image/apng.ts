// The frames of an APNG, rendered as a viewer shows them. libvips reads a PNG's default image only (the
// first frame, or a still image shown by viewers without APNG support), so the animation is replayed
// here: each frame's data (fcTL + IDAT or fdAT chunks) becomes a standalone PNG with the file's own
// palette, transparency and colour chunks, decoded by sharp, and drawn on the canvas with the frame's
// blend operation (source or over); after it, its dispose operation (none, background, previous).
// One pass over the frames up to the last one asked for; memory: the canvas, one frame, and for
// `previous` one saved region. Frames are the animation's (acTL, fcTL), as probe-png.ts counts them.

import { crc32 } from 'node:zlib';
import sharp from 'sharp';

interface FrameControl {
  width: number;
  height: number;
  x: number;
  y: number;
  dispose: number;
  blend: number;
  data: Uint8Array[];
}

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** Chunks before the image data that each frame's PNG needs to decode as the file does. */
const CARRIED = new Set(['PLTE', 'tRNS', 'gAMA', 'cHRM', 'sRGB', 'iCCP', 'sBIT']);

/** One PNG chunk: length, type, data and its CRC. */
export function pngChunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  out.set(data, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/** The animation's frames and what each frame's PNG carries; throws on a malformed animation. */
function readAnimation(bytes: Uint8Array): {
  width: number;
  height: number;
  ihdr: Buffer;
  carried: Buffer[];
  frames: FrameControl[];
} {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const ihdr = Buffer.from(view.subarray(16, 29));
  const width = view.readUInt32BE(16);
  const height = view.readUInt32BE(20);
  const carried: Buffer[] = [];
  const frames: FrameControl[] = [];
  let seenData = false;
  for (let p = 8; p + 12 <= view.length; ) {
    const length = view.readUInt32BE(p);
    const type = view.toString('ascii', p + 4, p + 8);
    if (p + 12 + length > view.length) throw new Error(`APNG chunk ${type} runs past the end`);
    const data = view.subarray(p + 8, p + 8 + length);
    if (type === 'IEND') break;
    if (type === 'fcTL') {
      if (length < 26) throw new Error('short fcTL chunk');
      const frame = {
        width: data.readUInt32BE(4),
        height: data.readUInt32BE(8),
        x: data.readUInt32BE(12),
        y: data.readUInt32BE(16),
        dispose: data[24] as number,
        blend: data[25] as number,
        data: [],
      };
      if (
        frame.width === 0 ||
        frame.height === 0 ||
        frame.x + frame.width > width ||
        frame.y + frame.height > height
      ) {
        throw new Error('APNG frame outside the canvas');
      }
      frames.push(frame);
    } else if (type === 'IDAT') {
      seenData = true;
      // The default image is the first frame only when an fcTL came before it.
      if (frames.length === 1) frames[0]?.data.push(data);
    } else if (type === 'fdAT') {
      if (length < 4) throw new Error('short fdAT chunk');
      const frame = frames.at(-1);
      if (!frame) throw new Error('fdAT before any fcTL');
      frame.data.push(data.subarray(4));
    } else if (!seenData && CARRIED.has(type)) {
      carried.push(pngChunk(type, data));
    }
    p += 12 + length;
  }
  return { width, height, ihdr, carried, frames };
}

/** A standalone PNG of one frame's data. */
function framePng(ihdr: Buffer, carried: readonly Buffer[], frame: FrameControl): Buffer {
  const header = Buffer.from(ihdr);
  header.writeUInt32BE(frame.width, 0);
  header.writeUInt32BE(frame.height, 4);
  return Buffer.concat([
    SIGNATURE,
    pngChunk('IHDR', header),
    ...carried,
    pngChunk('IDAT', Buffer.concat(frame.data)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** Draws `src` (RGBA, frame-sized) on the RGBA canvas at the frame's place, by its blend operation. */
function draw(canvas: Uint8Array, canvasWidth: number, src: Uint8Array, f: FrameControl): void {
  for (let y = 0; y < f.height; y++) {
    let d = ((f.y + y) * canvasWidth + f.x) * 4;
    let s = y * f.width * 4;
    for (let x = 0; x < f.width; x++, d += 4, s += 4) {
      const sa = src[s + 3] as number;
      if (f.blend === 0 || sa === 255) {
        canvas[d] = src[s] as number;
        canvas[d + 1] = src[s + 1] as number;
        canvas[d + 2] = src[s + 2] as number;
        canvas[d + 3] = sa;
      } else if (sa > 0) {
        const da = ((canvas[d + 3] as number) * (255 - sa)) / 255;
        const a = sa + da;
        for (let c = 0; c < 3; c++) {
          canvas[d + c] = Math.round(((src[s + c] as number) * sa + (canvas[d + c] as number) * da) / a);
        }
        canvas[d + 3] = Math.round(a);
      }
    }
  }
}

function region(canvas: Uint8Array, canvasWidth: number, f: FrameControl): Uint8Array {
  const out = new Uint8Array(f.width * f.height * 4);
  for (let y = 0; y < f.height; y++) {
    const from = ((f.y + y) * canvasWidth + f.x) * 4;
    out.set(canvas.subarray(from, from + f.width * 4), y * f.width * 4);
  }
  return out;
}

function restore(
  canvas: Uint8Array,
  canvasWidth: number,
  f: FrameControl,
  saved: Uint8Array | undefined,
): void {
  for (let y = 0; y < f.height; y++) {
    const to = ((f.y + y) * canvasWidth + f.x) * 4;
    if (saved) canvas.set(saved.subarray(y * f.width * 4, (y + 1) * f.width * 4), to);
    else canvas.fill(0, to, to + f.width * 4);
  }
}

/** An APNG's canvas after each of the frames `indices` (ascending), as RGBA of its width × height. */
export async function* apngFrames(
  bytes: Uint8Array,
  indices: readonly number[],
  timeoutSeconds: number,
): AsyncGenerator<{ index: number; rgba: Uint8Array; width: number; height: number }> {
  const { width, height, ihdr, carried, frames } = readAnimation(bytes);
  const last = Math.max(...indices);
  if (last >= frames.length) throw new Error(`APNG has ${frames.length} frames, frame ${last} asked for`);
  const canvas = new Uint8Array(width * height * 4);
  for (let i = 0; i <= last; i++) {
    const f = frames[i] as FrameControl;
    if (f.data.length === 0) throw new Error(`APNG frame ${i} has no data`);
    // Dispose `previous` on the first frame is `background` (APNG specification).
    const dispose = i === 0 && f.dispose === 2 ? 1 : f.dispose;
    const saved = dispose === 2 ? region(canvas, width, f) : undefined;
    let pipeline = sharp(framePng(ihdr, carried, f), { failOn: 'error' })
      .ensureAlpha()
      .toColourspace('srgb')
      .raw({ depth: 'uchar' });
    if (timeoutSeconds > 0) pipeline = pipeline.timeout({ seconds: timeoutSeconds });
    const { data, info } = await pipeline.toBuffer({ resolveWithObject: true });
    if (info.width !== f.width || info.height !== f.height || info.channels !== 4) {
      throw new Error(`APNG frame ${i} decoded to ${info.width}x${info.height}x${info.channels}`);
    }
    draw(canvas, width, data, f);
    if (indices.includes(i)) yield { index: i, rgba: canvas.slice(), width, height };
    if (dispose === 1) restore(canvas, width, f, undefined);
    else if (dispose === 2) restore(canvas, width, f, saved);
  }
}
