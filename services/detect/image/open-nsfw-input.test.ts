// Fast checks of open_nsfw's preprocessing that need no Python; its parity with the Python package
// itself (Pillow, bit for bit) is models/open-nsfw-parity.test.ts.

import { describe, expect, it } from 'vitest';
import { OPEN_NSFW_INPUT_SIZE, openNsfwInput } from './open-nsfw-input.ts';
import { pilBilinearResize } from './pil-resize.ts';

/** Deterministic noise (LCG), so every run sees the same image. */
function noise(width: number, height: number, seed = 7): Uint8Array {
  const out = new Uint8Array(width * height * 3);
  let s = seed >>> 0;
  for (let i = 0; i < out.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}

/** Byte equality (vitest's deep equality walks a typed array element by element: seconds here). */
const same = (a: Uint8Array, b: Uint8Array): boolean =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('pilBilinearResize', () => {
  it('keeps a uniform image uniform, up and down', () => {
    const grey = new Uint8Array(37 * 300 * 3).fill(77);
    for (const [w, h] of [
      [256, 256],
      [5, 1000],
    ] as const) {
      expect(new Set(pilBilinearResize(grey, 37, 300, w, h))).toEqual(new Set([77]));
    }
  });

  it('returns a copy at the same size', () => {
    const rgb = noise(10, 7);
    const copy = pilBilinearResize(rgb, 10, 7, 10, 7);
    expect(Buffer.from(copy).equals(Buffer.from(rgb))).toBe(true);
    expect(copy).not.toBe(rgb);
  });

  it("runs Pillow's passes in Pillow's order: vertical first when the height shrinks most", () => {
    // 246 × 345 → 256 × 256 (the corpus's uncompressed_tiff.tiff): the height shrinks, the width grows.
    const rgb = noise(246, 345);
    const whole = pilBilinearResize(rgb, 246, 345, 256, 256);
    const verticalFirst = pilBilinearResize(pilBilinearResize(rgb, 246, 345, 246, 256), 246, 256, 256, 256);
    const horizontalFirst = pilBilinearResize(pilBilinearResize(rgb, 246, 345, 256, 345), 256, 345, 256, 256);
    expect(same(whole, verticalFirst)).toBe(true);
    // Each pass rounds to 8 bits, so the other order differs: the order matters.
    expect(same(whole, horizontalFirst)).toBe(false);
    // Both shrink alike: horizontal first.
    const square = noise(400, 300);
    const squareWhole = pilBilinearResize(square, 400, 300, 256, 256);
    expect(
      same(squareWhole, pilBilinearResize(pilBilinearResize(square, 400, 300, 256, 300), 256, 300, 256, 256)),
    ).toBe(true);
  });
});

describe('openNsfwInput', () => {
  it('is NHWC 224 × 224 × 3, BGR with the Caffe mean (104, 117, 123) subtracted', async () => {
    const width = 300;
    const height = 200;
    const rgb = new Uint8Array(width * height * 3);
    for (let i = 0; i < rgb.length; i += 3) rgb.set([200, 100, 50], i);
    const input = await openNsfwInput(rgb, width, height);
    expect(input.length).toBe(OPEN_NSFW_INPUT_SIZE * OPEN_NSFW_INPUT_SIZE * 3);
    // A uniform colour survives the JPEG round trip within a level or two (YCbCr rounding).
    const expected = [50 - 104, 100 - 117, 200 - 123];
    let worst = 0;
    for (let i = 0; i < input.length; i++) {
      worst = Math.max(worst, Math.abs((input[i] as number) - (expected[i % 3] as number)));
    }
    expect(worst).toBeLessThanOrEqual(2);
  });

  it('sees only the centre 224 of the 256 square: a border of 16 px or less never reaches the model', async () => {
    const size = 256;
    const framed = new Uint8Array(size * size * 3).fill(128);
    for (let y = 0; y < size; y++)
      for (let x = 0; x < size; x++)
        if (x < 12 || y < 12 || x >= size - 12 || y >= size - 12)
          framed.fill(255, (y * size + x) * 3, (y * size + x) * 3 + 3);
    const plain = new Uint8Array(size * size * 3).fill(128);
    const a = await openNsfwInput(framed, size, size);
    const b = await openNsfwInput(plain, size, size);
    expect(same(new Uint8Array(a.buffer), new Uint8Array(b.buffer))).toBe(true);
  });
});
