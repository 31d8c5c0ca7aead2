import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { prng } from '../../../test/support/prng.ts';
import { decodeRgb, shrinkScale, toModelInput } from './decode.ts';
import { resizeToTensor } from './nsfwjs-input.ts';
import { probeHeader } from './probe.ts';

async function codeOf(p: Promise<unknown>): Promise<number | 'ok'> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return (err as ApiError).code;
  }
}

describe('resizeToTensor is bit-exact with nsfwjs (tfjs CPU kernel)', () => {
  beforeAll(async () => {
    await tf.setBackend('cpu');
  });

  // What nsfwjs does: fromPixels → toFloat().div(255) → resizeBilinear(alignCorners = true).
  function nsfwjsReference(rgb: Uint8Array, w: number, h: number, size: number): Float32Array {
    return tf.tidy(() => {
      const img = tf.tensor3d(rgb, [h, w, 3], 'int32').toFloat().div(tf.scalar(255)) as tf.Tensor3D;
      const resized = h === size && w === size ? img : tf.image.resizeBilinear(img, [size, size], true);
      return resized.dataSync() as Float32Array;
    });
  }

  const shapes: Array<[number, number, number]> = [
    [37, 23, 224],
    [640, 427, 224],
    [2, 1, 224], // upscaling from a tiny image
    [224, 224, 224], // nsfwjs skips the resize at exactly the model size
    [1, 1, 5],
    [500, 499, 299],
    [3, 7, 1],
  ];
  for (const [w, h, size] of shapes) {
    it(`${w}x${h} → ${size}`, () => {
      const random = prng(w * 1000 + h);
      const rgb = new Uint8Array(w * h * 3);
      for (let i = 0; i < rgb.length; i++) rgb[i] = Math.floor(random() * 256);
      const ours = resizeToTensor(rgb, w, h, size);
      const theirs = nsfwjsReference(rgb, w, h, size);
      expect(ours.length).toBe(size * size * 3);
      expect(
        Buffer.from(ours.buffer).equals(Buffer.from(theirs.buffer, theirs.byteOffset, theirs.byteLength)),
      ).toBe(true);
    });
  }

  it('samples the corners exactly (align_corners)', () => {
    const rgb = Uint8Array.from([0, 0, 0, 255, 255, 255]); // 2×1: black, white
    const t = resizeToTensor(rgb, 2, 1, 3);
    expect([...t.subarray(0, 9)]).toEqual([0, 0, 0, 0.5, 0.5, 0.5, 1, 1, 1]);
  });
});

describe('decodeRgb', () => {
  it('never hands sharp bytes whose signature differs from the probed format (4002)', async () => {
    const png = readFileSync(fixture('swiss.png'));
    expect(await codeOf(decodeRgb(png, { format: 'jpeg', width: 68, height: 68, frames: 1 }))).toBe(4002);
  });

  it("repeats the pixel limit as sharp's limitInputPixels (second guard → 4005)", async () => {
    // A forged probe result that understates the 65536×65536 header: sharp itself refuses.
    const bomb = readFileSync(fixture('65536-uint32-limit.png'));
    expect(await codeOf(decodeRgb(bomb, { format: 'png', width: 10, height: 10, frames: 1 }))).toBe(4005);
  });

  it('leaves only the whitelisted libvips loaders enabled (SVG/AVIF blocked process-wide)', async () => {
    const png = readFileSync(fixture('swiss.png'));
    await decodeRgb(png, probeHeader(png, 'png')); // configures sharp
    await expect(
      sharp(readFileSync(fixture('check.svg')))
        .raw()
        .toBuffer(),
    ).rejects.toThrow();
    await expect(
      sharp(readFileSync(fixture('pitm.avif')))
        .raw()
        .toBuffer(),
    ).rejects.toThrow();
    await expect(sharp(png).raw().toBuffer()).resolves.toBeInstanceOf(Buffer);
  });

  it('maps every decoder failure to 4005', async () => {
    const bytes = readFileSync(fixture('truncated.jpg'));
    const probed = probeHeader(bytes, 'jpeg');
    expect(await codeOf(decodeRgb(bytes, probed))).toBe(4005);
    await expect(decodeRgb(bytes, probed)).rejects.toThrow(/truncated/);
  });
});

describe('JPEG shrink-on-load (option, off by default)', () => {
  it('picks 1/8 or 1/4 only while the short edge stays >= the model size', () => {
    expect(shrinkScale(4000, 3000, 224)).toBe(8);
    expect(shrinkScale(1155, 866, 224)).toBe(1); // 866 / 4 < 224
    expect(shrinkScale(2000, 1000, 224)).toBe(4);
    expect(shrinkScale(2000, 1000, 299)).toBe(1);
  });

  it('decodes at reduced scale, upright, and stays close to the full-resolution tensor', async () => {
    const bytes = readFileSync(fixture('2569067123_aca715a2ee_o.jpg')); // 2725×2225 → 1/8
    const probed = probeHeader(bytes, 'jpeg');
    const full = await toModelInput(bytes, probed, 224);
    const shrunk = await toModelInput(bytes, probed, 224, { shrinkOnLoad: true });
    expect([full.decodedWidth, full.decodedHeight]).toEqual([2725, 2225]);
    expect(shrunk.decodedWidth).toBe(Math.floor(2725 / 8));
    expect(Math.abs(shrunk.decodedHeight - 2225 / 8)).toBeLessThanOrEqual(1);
    let sum = 0;
    for (let i = 0; i < full.tensor.length; i++)
      sum += Math.abs((full.tensor[i] as number) - (shrunk.tensor[i] as number));
    expect(sum / full.tensor.length).toBeLessThan(0.05);
  });

  it('is ignored for other formats', async () => {
    const bytes = readFileSync(fixture('alpha-layer-0-background.png'));
    const decoded = await decodeRgb(bytes, probeHeader(bytes, 'png'), { shrinkOnLoad: true });
    expect(decoded.width).toBe(2048);
  });
});
