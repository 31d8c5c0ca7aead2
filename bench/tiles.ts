// The bench's `tiles` section: the answer time of long JPEGs through the real server, whose decoder
// processes trim margins and cut a long frame into tiles (services/detect/image/frame-layout.ts): the
// largest allowed long JPEG (30,000 × 6,666, 200 MP, within the spec's JPEG limits; libjpeg shrinks it
// on load to 3,750 × 833, then 8 tiles) and a 30,000 × 40 strip, each with MAX_TILES at its default and
// at 1 (the frame squashed whole, as nsfwjs would), one server at a time, one request at a time.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { SETTINGS } from '../lib/common/settings.ts';
import { fixture } from '../test/fixtures/corpus.ts';
import { startServer } from '../test/support/server-process.ts';
import { closeLoadConnections, postOnce } from './http-load.ts';

const ROUNDS = 3;

/** A JPEG of width × height filled with a corpus photo, repeated (photo-like content, no margin). */
async function longJpeg(width: number, height: number): Promise<Buffer> {
  const photo = readFileSync(fixture('low-contrast.jpg'));
  const tile = await sharp(photo)
    .resize({ height: Math.min(245, height) })
    .png()
    .toBuffer();
  return sharp({ create: { width, height, channels: 3, background: '#808080' }, limitInputPixels: false })
    .composite([{ input: tile, tile: true }])
    .jpeg({ quality: 70 })
    .toBuffer();
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

export async function tilesSection(): Promise<Array<[string, string]>> {
  const images: Array<[string, Buffer]> = [
    ['30,000 × 6,666 JPEG (200 MP)', await longJpeg(30_000, 6_666)],
    ['30,000 × 40 JPEG', await longJpeg(30_000, 40)],
  ];
  const lines: Array<[string, string]> = [];
  for (const maxTiles of [SETTINGS.MAX_TILES.default, 1]) {
    const server = await startServer({
      MAX_TILES: String(maxTiles),
      ANON_PER_MINUTE: '1000000',
      ANON_PER_DAY: '1000000',
      LOG_LEVEL: 'warn',
    });
    try {
      const url = `${server.url}/api/public/detect`;
      for (const [name, body] of images) {
        const answers = [];
        for (let i = 0; i < ROUNDS; i++) answers.push(await postOnce(url, body, 'image/jpeg'));
        const statuses = [...new Set(answers.map((a) => a.status))].join(', ');
        lines.push([
          `tiles: ${name}, MAX_TILES=${maxTiles}`,
          `answered in ${median(answers.map((a) => a.ms)).toFixed(0)} ms (median of ${ROUNDS}; ` +
            `${(body.length / 1048576).toFixed(1)} MiB; status ${statuses})`,
        ]);
      }
    } finally {
      closeLoadConnections();
      await server.stop();
    }
  }
  return lines;
}
