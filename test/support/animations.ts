// Animated inputs made from still frames, for the frame tests: GIF, animated WebP and multi-page TIFF
// by sharp (libvips), APNG written here (libvips writes no APNG): each frame's image data from a PNG of
// it, framed by acTL, fcTL and fdAT chunks as the APNG specification says.

import sharp from 'sharp';
import { pngChunk as chunk } from '../../services/detect/image/apng.ts';

export type AnimatedFormat = 'gif' | 'webp' | 'tiff' | 'apng';

/** The IHDR data and the joined IDAT data of a PNG. */
function pngParts(png: Buffer): { ihdr: Buffer; data: Buffer } {
  const idat: Buffer[] = [];
  let ihdr: Buffer = Buffer.alloc(0);
  for (let p = 8; p + 12 <= png.length; ) {
    const length = png.readUInt32BE(p);
    const type = png.toString('ascii', p + 4, p + 8);
    if (type === 'IHDR') ihdr = png.subarray(p + 8, p + 8 + length);
    if (type === 'IDAT') idat.push(png.subarray(p + 8, p + 8 + length));
    p += 12 + length;
  }
  return { ihdr, data: Buffer.concat(idat) };
}

/** An APNG of same-sized RGB frames, each replacing the last (blend source, dispose none). */
export async function apngOf(frames: readonly Buffer[]): Promise<Buffer> {
  const pngs = await Promise.all(
    frames.map((f) => sharp(f).removeAlpha().toColourspace('srgb').png({ palette: false }).toBuffer()),
  );
  const parts = pngs.map(pngParts);
  const first = parts[0] as { ihdr: Buffer; data: Buffer };
  const width = first.ihdr.readUInt32BE(0);
  const height = first.ihdr.readUInt32BE(4);
  const out: Buffer[] = [
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', first.ihdr),
  ];
  const actl = Buffer.alloc(8);
  actl.writeUInt32BE(frames.length, 0);
  out.push(chunk('acTL', actl));
  let seq = 0;
  for (const [i, part] of parts.entries()) {
    const fctl = Buffer.alloc(26);
    fctl.writeUInt32BE(seq++, 0);
    fctl.writeUInt32BE(width, 4);
    fctl.writeUInt32BE(height, 8);
    fctl.writeUInt16BE(1, 20); // delay 1/10 s
    fctl.writeUInt16BE(10, 22);
    out.push(chunk('fcTL', fctl));
    if (i === 0) out.push(chunk('IDAT', part.data));
    else {
      const seqBytes = Buffer.alloc(4);
      seqBytes.writeUInt32BE(seq++, 0);
      out.push(chunk('fdAT', Buffer.concat([seqBytes, part.data])));
    }
  }
  out.push(chunk('IEND', Buffer.alloc(0)));
  return Buffer.concat(out);
}

/** `frames` (same size) as an animation or multi-page file of `format`, lossless where it can be. */
export async function animationOf(format: AnimatedFormat, frames: readonly Buffer[]): Promise<Buffer> {
  if (format === 'apng') return apngOf(frames);
  const joined = sharp([...frames], { join: { animated: true } });
  if (format === 'gif') return joined.gif().toBuffer();
  if (format === 'webp') return joined.webp({ lossless: true }).toBuffer();
  return joined.tiff({ compression: 'lzw' }).toBuffer();
}
