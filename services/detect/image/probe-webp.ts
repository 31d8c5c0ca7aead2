// The WebP header: the first chunk's size (VP8, VP8L or VP8X), and an animation's frames (ANMF chunks).

import { MAX_WEBP_CHUNKS } from './image-cost.ts';
import { type Bytes, type Dims, HeaderError } from './probe-bytes.ts';

export function probeWebp(r: Bytes): Dims {
  r.need(0, 20, 'first chunk');
  const riffEnd = Math.min(r.length, 8 + r.u32le(4));
  const fourcc = r.ascii(12, 4);
  const d = 20; // first chunk's payload
  let width: number;
  let height: number;
  let frames = 1;
  if (fourcc === 'VP8 ') {
    r.need(d, 10, 'VP8 frame header');
    if (r.u8(d + 3) !== 0x9d || r.u8(d + 4) !== 0x01 || r.u8(d + 5) !== 0x2a) {
      throw new HeaderError('bad VP8 start code');
    }
    width = r.u16le(d + 6) & 0x3fff;
    height = r.u16le(d + 8) & 0x3fff;
  } else if (fourcc === 'VP8L') {
    r.need(d, 5, 'VP8L header');
    if (r.u8(d) !== 0x2f) throw new HeaderError('bad VP8L signature');
    const bits = r.u32le(d + 1);
    width = (bits & 0x3fff) + 1;
    height = ((bits >>> 14) & 0x3fff) + 1;
  } else if (fourcc === 'VP8X') {
    r.need(d, 10, 'VP8X header');
    const flags = r.u8(d);
    width = r.u24le(d + 4) + 1;
    height = r.u24le(d + 7) + 1;
    if (flags & 0x02) {
      // Animated: count ANMF chunks at the top level of the RIFF container.
      frames = 0;
      let p = 12;
      for (let chunks = 0; p + 8 <= riffEnd; chunks++) {
        if (chunks > MAX_WEBP_CHUNKS)
          throw new HeaderError(`over ${MAX_WEBP_CHUNKS} chunks (more than the frames allowed)`);
        const size = r.u32le(p + 4);
        if (r.ascii(p, 4) === 'ANMF') frames += 1;
        p += 8 + size + (size & 1);
      }
      if (frames === 0) throw new HeaderError('animated WebP without frames');
    }
  } else {
    throw new HeaderError(`unknown first chunk "${fourcc.replace(/[^\x20-\x7e]/g, '?')}"`);
  }
  if (width === 0 || height === 0) throw new HeaderError(`zero dimension (${width}x${height})`);
  return { width, height, frames };
}
