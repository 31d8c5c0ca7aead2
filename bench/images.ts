// The benchmark's images: corpus photos re-encoded at about one megapixel, the size the latency target
// speaks of (and at three, for the Python peer's comparison), plus their decoded RGB for the nsfwjs
// baseline. Built in memory on every run.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { fixture } from '../test/fixtures/corpus.ts';

const SOURCES = ['2569067123_aca715a2ee_o.jpg', 'flowers.jpeg', 'Landscape_1.jpg', 'concert.jpg'];
export const ONE_MP = { width: 1155, height: 866 };
export const THREE_MP = { width: 2000, height: 1500 };

export interface BenchImage {
  name: string;
  jpeg: Buffer;
  rgb: Uint8Array;
  width: number;
  height: number;
}

export async function benchImages(size: { width: number; height: number } = ONE_MP): Promise<BenchImage[]> {
  return Promise.all(
    SOURCES.map(async (name) => {
      const jpeg = await sharp(readFileSync(fixture(name)))
        .rotate()
        .resize(size.width, size.height, { fit: 'cover' })
        .jpeg({ quality: 85 })
        .toBuffer();
      const { data, info } = await sharp(jpeg).removeAlpha().raw().toBuffer({ resolveWithObject: true });
      return { name, jpeg, rgb: new Uint8Array(data), width: info.width, height: info.height };
    }),
  );
}

/** `length` bytes of xorshift noise from `seed`: incompressible pixels, the same every run. */
export function noise(length: number, seed = 0x12345678): Buffer {
  const bytes = Buffer.allocUnsafe(length);
  let x = seed;
  for (let i = 0; i < bytes.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

/** A valid ~49 MB PNG of noise (4096×4000 RGB, within the non-JPEG limits): the worst honest upload. */
export async function largePng(): Promise<Buffer> {
  const width = 4096;
  const height = 4000;
  const pixels = noise(width * height * 3);
  return sharp(pixels, { raw: { width, height, channels: 3 } })
    .png({ compressionLevel: 1 })
    .toBuffer();
}
