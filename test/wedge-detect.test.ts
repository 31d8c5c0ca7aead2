// No image can wedge scoring: JPEGs of the kinds on which libjpeg-turbo's row skipping loops forever
// (luma sampled 4x vertically beside 2x chroma, several scans) or decodes other pixels
// (arithmetic-coded ones) sent to the real server — real scoring workers, the real addon — more of
// them at once than there are workers. Every one is answered, and a detect sent after them is too.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildMakeJpeg, type JpegCase, makeJpegs } from './jpeg-space/jpeg-space.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';
import { JPEG } from './support/stack-client.ts';
import { C_COMPILER, describeWithTool, JPEG_TENSOR_ADDON } from './support/tools.ts';

const WEDGING: JpegCase[] = (<Array<Omit<JpegCase, 'seed'>>>[
  { sampling: '1x4,1x2,1x1', scans: 'progressive', coding: 'huffman', restart: 0, width: 300, height: 1000 },
  { sampling: '2x4,1x2,1x1', scans: 'progressive', coding: 'huffman', restart: 0, width: 300, height: 2000 },
  { sampling: '4x4,2x2,1x1', scans: 'separate', coding: 'huffman', restart: 0, width: 120, height: 1000 },
  { sampling: '1x4,1x2,1x1', scans: 'separate', coding: 'huffman', restart: 0, width: 64, height: 2000 },
  {
    sampling: '1x4,1x2,1x1',
    scans: 'sequential',
    coding: 'arithmetic',
    restart: 0,
    width: 300,
    height: 1000,
  },
  {
    sampling: '1x4,1x2,1x1',
    scans: 'progressive',
    coding: 'arithmetic',
    restart: 0,
    width: 90,
    height: 1000,
  },
]).map((c, i) => ({ ...c, seed: i + 1 }));

describeWithTool([C_COMPILER, JPEG_TENSOR_ADDON], 'images that can wedge a row-skipping decoder', () => {
  let dir: string;
  let server: ServerProcess;
  let images: Buffer[];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-wedge-'));
    images = makeJpegs(buildMakeJpeg(dir), WEDGING, dir).map((path) => readFileSync(path));
    // Two workers: a decoder that looped on one of these cases would hold one forever.
    server = await startServer({
      JPEG_DECODER: 'libjpeg',
      SCORING_WORKERS: '2',
      ANON_PER_MINUTE: '1000',
      ANON_PER_DAY: '1000',
    });
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const detect = (body: Buffer) =>
    fetch(`${server.url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: new Uint8Array(body),
    }).then(async (res) => ({ status: res.status, body: (await res.json()) as { code: number } }));

  it('answers every one of them, all at once, and the detect sent after them', async () => {
    const answers = await Promise.all(images.map(detect));
    expect(answers.map((a) => a.status)).toEqual(images.map(() => 200));
    expect((await detect(JPEG)).status).toBe(200);
    expect((await fetch(`${server.url}/internal/ready`)).status).toBe(200);
  });
});
