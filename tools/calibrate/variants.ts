// Re-encodings of an image that must not change a moderation decision: each is made from the same
// upright, white-flattened sRGB pixels, so what differs from the original is only how those pixels are
// stored (format, quality, size, orientation tag, alpha, a 1-pixel margin).

import sharp from 'sharp';

/** Upright 8-bit sRGB RGB pixels, alpha flattened onto white (what the service scores). */
export interface Pixels {
  data: Buffer;
  width: number;
  height: number;
}

export interface Variant {
  name: string;
  /** What the variant is, in a few words (the table's legend). */
  what: string;
  encode(p: Pixels): Promise<Buffer>;
}

const WHITE = { r: 255, g: 255, b: 255 };
const raw = (p: Pixels) => sharp(p.data, { raw: { width: p.width, height: p.height, channels: 3 } });

/** The pixels as the service sees the file: first frame, EXIF orientation applied, flattened on white. */
export async function decodeUpright(bytes: Uint8Array): Promise<Pixels> {
  const { data, info } = await sharp(bytes, { pages: 1, page: 0 })
    .autoOrient()
    .flatten({ background: WHITE })
    .toColourspace('srgb')
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height };
}

/**
 * The pixels as RGBA where every pure white pixel is fully transparent with black stored under it:
 * flattened onto white they are the same pixels again, so only the alpha path differs.
 */
export function whiteAsTransparent(p: Pixels): Buffer {
  const n = p.width * p.height;
  const out = Buffer.alloc(n * 4);
  for (let i = 0; i < n; i++) {
    const r = p.data[i * 3] as number;
    const g = p.data[i * 3 + 1] as number;
    const b = p.data[i * 3 + 2] as number;
    if (r === 255 && g === 255 && b === 255) continue;
    out[i * 4] = r;
    out[i * 4 + 1] = g;
    out[i * 4 + 2] = b;
    out[i * 4 + 3] = 255;
  }
  return out;
}

const jpeg = (quality: number): Variant => ({
  name: `jpeg-q${quality}`,
  what: `JPEG quality ${quality} (4:2:0)`,
  encode: (p) => raw(p).jpeg({ quality }).toBuffer(),
});

export const VARIANTS: readonly Variant[] = [
  jpeg(95),
  jpeg(75),
  jpeg(60),
  { name: 'png', what: 'PNG (lossless)', encode: (p) => raw(p).png().toBuffer() },
  { name: 'webp', what: 'WebP quality 80 (lossy)', encode: (p) => raw(p).webp({ quality: 80 }).toBuffer() },
  {
    name: 'half',
    what: 'half width and height (Lanczos 3), PNG',
    encode: (p) =>
      raw(p)
        .resize(Math.max(1, Math.round(p.width / 2)), Math.max(1, Math.round(p.height / 2)), { fit: 'fill' })
        .png()
        .toBuffer(),
  },
  {
    // Orientation 6 means "turn 90° clockwise to view": the pixels are stored turned 90° anticlockwise.
    name: 'exif-rotated',
    what: 'stored turned 90° with EXIF orientation 6, JPEG quality 95',
    encode: async (p) => {
      const turned = await raw(p).rotate(270).raw().toBuffer({ resolveWithObject: true });
      return sharp(turned.data, {
        raw: { width: turned.info.width, height: turned.info.height, channels: 3 },
      })
        .jpeg({ quality: 95 })
        .withMetadata({ orientation: 6 })
        .toBuffer();
    },
  },
  {
    name: 'alpha',
    what: 'RGBA PNG, its white pixels transparent (flattened onto white: the same pixels)',
    encode: (p) =>
      sharp(whiteAsTransparent(p), { raw: { width: p.width, height: p.height, channels: 4 } })
        .png()
        .toBuffer(),
  },
  {
    name: 'border',
    what: 'a 1-pixel white border on each side, PNG',
    encode: (p) =>
      raw(p).extend({ top: 1, bottom: 1, left: 1, right: 1, background: WHITE }).png().toBuffer(),
  },
];
