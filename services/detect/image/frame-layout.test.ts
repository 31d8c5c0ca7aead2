// Margins and tiles (frame-layout.ts) on pixels made here, and the model input toModelInput makes with
// them: bounded for the longest allowed JPEG, bit-identical to nsfwjs's for a frame of ordinary shape
// without margins.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { toModelInput } from './decode.ts';
import { type Box, contentBox, frameLayout, TILE_LENGTH, tileBoxes } from './frame-layout.ts';
import { libjpegUnavailable } from './libjpeg/jpeg-tensor.ts';
import { probeHeader } from './probe.ts';
import { sniffFormat } from './sniff.ts';

/** width × height RGB filled with `bg`, with a noise picture at (x, y) of w × h. */
function canvas(width: number, height: number, bg: number[], picture?: Box): Uint8Array {
  const rgb = new Uint8Array(width * height * 3);
  let seed = 7;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 3;
      const inside =
        picture &&
        x >= picture.left &&
        x < picture.left + picture.width &&
        y >= picture.top &&
        y < picture.top + picture.height;
      for (let c = 0; c < 3; c++) {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        rgb[i + c] = inside ? seed & 0xff : (bg[c] as number);
      }
    }
  }
  return rgb;
}

describe('contentBox', () => {
  it('trims a uniform padding to the picture inside it', () => {
    const picture = { left: 12, top: 10, width: 100, height: 80 };
    expect(contentBox(canvas(124, 100, [255, 255, 255], picture), 124, 100)).toEqual(picture);
  });

  it('keeps stripes of different colours on opposite sides (a flag is picture)', () => {
    const rgb = new Uint8Array(90 * 60 * 3);
    const stripes = [
      [174, 28, 40],
      [255, 255, 255],
      [33, 70, 139],
    ];
    for (let y = 0; y < 60; y++)
      for (let x = 0; x < 90; x++) rgb.set(stripes[Math.floor(y / 20)] as number[], (y * 90 + x) * 3);
    expect(contentBox(rgb, 90, 60)).toEqual({ left: 0, top: 0, width: 90, height: 60 });
  });

  it('keeps a blank frame whole (nothing inside to find)', () => {
    expect(contentBox(canvas(200, 100, [0, 0, 0]), 200, 100)).toEqual({
      left: 0,
      top: 0,
      width: 200,
      height: 100,
    });
  });

  it('leaves a margin under 5 % of the edge (a 1-pixel frame line) alone', () => {
    const rgb = canvas(200, 200, [255, 255, 255], { left: 1, top: 1, width: 198, height: 198 });
    expect(contentBox(rgb, 200, 200)).toEqual({ left: 0, top: 0, width: 200, height: 200 });
  });

  it('finds the picture inside white top/left and black bottom/right margins', () => {
    const picture = { left: 40, top: 30, width: 200, height: 150 };
    const rgb = canvas(280, 210, [255, 255, 255], picture);
    paint(rgb, 280, { left: 0, top: 180, width: 280, height: 30 }, [0, 0, 0]);
    paint(rgb, 280, { left: 240, top: 0, width: 40, height: 210 }, [0, 0, 0]);
    expect(contentBox(rgb, 280, 210)).toEqual(picture);
  });

  it('finds the picture inside a white margin with a 1-pixel black frame line', () => {
    const picture = { left: 40, top: 30, width: 200, height: 150 };
    const rgb = canvas(280, 210, [255, 255, 255], picture);
    for (const line of [
      { left: 0, top: 0, width: 280, height: 1 },
      { left: 0, top: 209, width: 280, height: 1 },
      { left: 0, top: 0, width: 1, height: 210 },
      { left: 279, top: 0, width: 1, height: 210 },
    ])
      paint(rgb, 280, line, [0, 0, 0]);
    expect(contentBox(rgb, 280, 210)).toEqual(picture);
  });

  it('finds the picture inside a light grey margin with ±12 noise', () => {
    const picture = { left: 40, top: 30, width: 200, height: 150 };
    const rgb = canvas(280, 210, [220, 220, 220], picture);
    let seed = 3;
    for (let y = 0; y < 210; y++)
      for (let x = 0; x < 280; x++) {
        if (x >= 40 && x < 240 && y >= 30 && y < 180) continue;
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        rgb.fill(220 + ((seed >> 8) % 25) - 12, (y * 280 + x) * 3, (y * 280 + x) * 3 + 3);
      }
    expect(contentBox(rgb, 280, 210)).toEqual(picture);
  });

  it('finds a picture of a ninth of the frame centred in a blank canvas (no cap on a margin)', () => {
    const picture = { left: 200, top: 150, width: 200, height: 150 };
    expect(contentBox(canvas(600, 450, [255, 255, 255], picture), 600, 450)).toEqual(picture);
  });

  it('keeps the frame whole around a speck', () => {
    const rgb = canvas(600, 450, [255, 255, 255], { left: 300, top: 200, width: 10, height: 10 });
    expect(contentBox(rgb, 600, 450)).toEqual({ left: 0, top: 0, width: 600, height: 450 });
  });
});

describe('frameLayout', () => {
  it('scores a frame with margins as its content box and whole', () => {
    const picture = { left: 40, top: 30, width: 200, height: 150 };
    const rgb = canvas(280, 210, [255, 255, 255], picture);
    expect(frameLayout(rgb, 280, 210, 8)).toEqual([picture, { left: 0, top: 0, width: 280, height: 210 }]);
    expect(frameLayout(rgb, 280, 210, 1)).toEqual([picture]);
  });

  it('finds a picture anywhere in a long blank strip, either way round', () => {
    for (const left of [0, 3_000, 11_300, 19_600]) {
      const picture = { left, top: 50, width: 400, height: 300 };
      expect(frameLayout(canvas(20_000, 400, [255, 255, 255], picture), 20_000, 400, 8), `x ${left}`).toEqual(
        [picture],
      );
    }
    const upright = { left: 0, top: 11_300, width: 400, height: 300 };
    expect(frameLayout(canvas(400, 20_000, [255, 255, 255], upright), 400, 20_000, 8)).toEqual([upright]);
  });

  it('finds each picture of a strip, merging the closest past maxTiles', () => {
    const a = { left: 1_000, top: 20, width: 300, height: 300 };
    const b = { left: 5_000, top: 20, width: 300, height: 300 };
    const c = { left: 5_800, top: 20, width: 300, height: 300 };
    const rgb = canvas(10_000, 400, [255, 255, 255], a);
    paintNoise(rgb, 10_000, b);
    paintNoise(rgb, 10_000, c);
    expect(frameLayout(rgb, 10_000, 400, 8)).toEqual([a, b, c]);
    const two = frameLayout(rgb, 10_000, 400, 2);
    expect(two[0]).toEqual(a);
    expect(two.length).toBe(2);
    expect(two[1]).toEqual({ left: 5_000, top: 20, width: 1_100, height: 300 });
  });

  it('tiles a strip that is content all along, at most maxTiles', () => {
    const rgb = canvas(700, 160, [255, 255, 255], { left: 0, top: 0, width: 700, height: 160 });
    expect(frameLayout(rgb, 700, 160, 8).length).toBe(7);
    expect(frameLayout(rgb, 700, 160, 3).length).toBe(3);
  });
});

/** Fills `box` of RGB of the given width with `colour`. */
function paint(rgb: Uint8Array, width: number, box: Box, colour: number[]): void {
  for (let y = box.top; y < box.top + box.height; y++)
    for (let x = box.left; x < box.left + box.width; x++) rgb.set(colour, (y * width + x) * 3);
}

/** Fills `box` of RGB of the given width with noise (a picture). */
function paintNoise(rgb: Uint8Array, width: number, box: Box): void {
  let seed = 11;
  for (let y = box.top; y < box.top + box.height; y++)
    for (let x = box.left; x < box.left + box.width; x++)
      for (let c = 0; c < 3; c++) {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        rgb[(y * width + x) * 3 + c] = seed & 0xff;
      }
}

describe('tileBoxes', () => {
  it('leaves a frame of ordinary shape whole', () => {
    for (const [w, h] of [
      [1920, 1080],
      [1080, 2340],
      [2500, 1000],
    ] as const) {
      const frame = { left: 0, top: 0, width: w, height: h };
      expect(tileBoxes(frame, 8)).toEqual([frame]);
    }
  });

  it('cuts a long frame into overlapping 3:2 tiles that cover it', () => {
    const tiles = tileBoxes({ left: 0, top: 0, width: 400, height: 1200 }, 8);
    // 1200 / 400 = 3: L = 600, n = ceil(3·1200 / 600 − 2) = 4, stride 200.
    expect(tiles.map((t) => [t.top, t.height, t.width])).toEqual([
      [0, 600, 400],
      [200, 600, 400],
      [400, 600, 400],
      [600, 600, 400],
    ]);
    expect(TILE_LENGTH).toBe(1.5);
  });

  it('bounds the tiles of a 30,000 × 40 frame by maxTiles, still covering it', () => {
    for (const maxTiles of [1, 2, 8, 16]) {
      const tiles = tileBoxes({ left: 0, top: 0, width: 30_000, height: 40 }, maxTiles);
      expect(tiles.length).toBe(maxTiles);
      expect(tiles[0]?.left).toBe(0);
      const last = tiles.at(-1) as Box;
      expect(last.left + last.width).toBe(30_000);
      for (let i = 1; i < tiles.length; i++) {
        const [a, b] = [tiles[i - 1] as Box, tiles[i] as Box];
        expect(b.left).toBeLessThan(a.left + a.width); // overlapping
      }
    }
  });
});

async function input(name: string, opts: Parameters<typeof toModelInput>[3]) {
  const bytes = readFileSync(fixture(name));
  return toModelInput(bytes, probeHeader(bytes, await sniffFormat(bytes)), 224, opts);
}

describe('toModelInput with tiles and margins', () => {
  it('makes the same tensor as nsfwjs for frames of ordinary shape without margins', async () => {
    const decoders = libjpegUnavailable() ? (['sharp'] as const) : (['sharp', 'libjpeg'] as const);
    for (const name of ['flowers.jpeg', 'Landscape_6.jpg', 'Flag_of_the_Netherlands.png', '4.webp']) {
      for (const jpegDecoder of decoders) {
        const today = await input(name, { jpegDecoder });
        const laidOut = await input(name, { jpegDecoder, maxTiles: 8 });
        expect(laidOut.tiles, name).toBe(1);
        expect(laidOut.decoder, name).toBe(today.decoder);
        expect(Buffer.from(laidOut.tensor.buffer).equals(Buffer.from(today.tensor.buffer)), name).toBe(true);
      }
    }
  });

  it('scores a 30,000 × 40 JPEG as at most maxTiles tiles, decoded once', async () => {
    const jpeg = await sharp({ create: { width: 30_000, height: 40, channels: 3, background: '#7a5030' } })
      .jpeg()
      .toBuffer();
    const probed = probeHeader(jpeg, await sniffFormat(jpeg));
    for (const maxTiles of [1, 8]) {
      const made = await toModelInput(jpeg, probed, 224, { maxTiles });
      expect(made.tiles).toBe(maxTiles);
      expect(made.tensor.length).toBe(maxTiles * 224 * 224 * 3);
      expect(made.decoder).toBe('sharp');
    }
  });
});
