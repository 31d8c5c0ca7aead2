// `npm run robustness`: the tally against hand-counted figures, the re-encodings checked on their
// pixels, and the command itself on a few corpus images with one real model (the full table over the
// corpus is in docs/models.md, not run here).

import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { childEnv } from '../../test/support/children.ts';
import { ROOT } from '../../test/support/server-process.ts';
import { decide, RobustnessTally, robustnessTable } from './robustness.ts';
import { decodeUpright, type Pixels, VARIANTS } from './variants.ts';

const run = promisify(execFile);
const T = { allow: 0.1, block: 0.9 };
const variant = (name: string) => {
  const v = VARIANTS.find((x) => x.name === name);
  if (!v) throw new Error(name);
  return v;
};
const flat = async (bytes: Buffer): Promise<Pixels> => decodeUpright(bytes);

describe('the robustness tally', () => {
  it('decides as spec 2.2 does: allow below allow, block at or above block', () => {
    expect([0.0999, 0.1, 0.8999, 0.9, 1].map((s) => decide(s, T))).toEqual([
      'allow',
      'review',
      'review',
      'block',
      'block',
    ]);
  });

  it('counts unchanged decisions, refusals as changed, and keeps the largest change with its image', () => {
    const tally = new RobustnessTally(T);
    tally.add('m', 'png', 'a.jpg', 0.05, 0.05); // allow → allow, Δ 0
    tally.add('m', 'png', 'b.jpg', 0.5, 1); // review → block, Δ 0.5
    tally.add('m', 'png', 'c.jpg', 0.3, undefined); // refused
    tally.add('m', 'half', 'a.jpg', 0.05, 0.09); // allow → allow, Δ 0.04
    tally.add('m', 'half', 'b.jpg', 0.5, 0.25); // review → review, Δ 0.25
    expect(tally.get('m', 'png')).toEqual({
      scored: 3,
      unchanged: 1,
      refused: 1,
      maxDelta: 0.5,
      worst: 'b.jpg',
    });
    expect(tally.get('m', 'half')).toMatchObject({ scored: 2, unchanged: 2, maxDelta: 0.25, worst: 'b.jpg' });
    expect(tally.total('m')).toMatchObject({ scored: 5, unchanged: 3, refused: 1, worst: 'b.jpg (png)' });
    const table = robustnessTable(tally);
    expect(table).toContain('| m | png | 33.3 % (1/3) | 1 | 0.5000 | b.jpg |');
    expect(table).toContain('| m | half | 100.0 % (2/2) | 0 | 0.2500 | b.jpg |');
    expect(table).toContain('| **m** | **all** | **60.0 % (3/5)** | 1 | **0.5000** | b.jpg (png) |');
    // No change at all reads as an exact 0 with no image.
    const still = new RobustnessTally(T);
    still.add('m', 'png', 'a.jpg', 0.5, 0.5);
    expect(robustnessTable(still)).toContain('| m | png | 100.0 % (1/1) | 0 | 0 |  |');
  });
});

describe('the re-encodings', () => {
  it('keep the upright pixels: EXIF orientation 6 undone, white-as-transparent flattens back exactly, border and half size', async () => {
    // Landscape_6.jpg is stored 450 × 600 with orientation 6: upright it is 600 × 450.
    const base = await flat(readFileSync(fixture('Landscape_6.jpg')));
    expect([base.width, base.height]).toEqual([600, 450]);

    const rotated = await variant('exif-rotated').encode(base);
    const stored = await sharp(rotated).metadata();
    expect([stored.width, stored.height, stored.orientation]).toEqual([450, 600, 6]);
    const upright = await flat(rotated);
    expect([upright.width, upright.height]).toEqual([600, 450]);
    // Quality 95 loses a little: the mean difference is a few levels, not a turned image's.
    let sum = 0;
    for (let i = 0; i < base.data.length; i++)
      sum += Math.abs((base.data[i] as number) - (upright.data[i] as number));
    expect(sum / base.data.length).toBeLessThan(3);

    // 5_webp_a.webp has transparent parts, white once flattened: they are stored transparent over black.
    const withAlpha = await flat(readFileSync(fixture('5_webp_a.webp')));
    const alpha = await variant('alpha').encode(withAlpha);
    const meta = await sharp(alpha).metadata();
    expect(meta.channels).toBe(4);
    const { data: rgba } = await sharp(alpha).raw().toBuffer({ resolveWithObject: true });
    let transparent = 0;
    for (let i = 3; i < rgba.length; i += 4) if (rgba[i] === 0) transparent++;
    expect(transparent).toBeGreaterThan(0);
    expect((await flat(alpha)).data.equals(withAlpha.data)).toBe(true);

    const bordered = await flat(await variant('border').encode(base));
    expect([bordered.width, bordered.height]).toEqual([602, 452]);
    const half = await flat(await variant('half').encode(base));
    expect([half.width, half.height]).toEqual([300, 225]);
    expect((await flat(await variant('png').encode(base))).data.equals(base.data)).toBe(true);
  }, 60_000);
});

describe('npm run robustness', () => {
  const work = mkdtempSync(join(tmpdir(), 'nsfwdetector-robustness-test-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('prints, for one model, every re-encoding of the images the service scores', async () => {
    // Two images scored; check.svg is refused by the service (4002), corrupt-header.jpg unreadable,
    // grey-plus-alpha.gif (2 × 1) under --min-edge.
    for (const name of [
      '320x240.jpg',
      'Landscape_6.jpg',
      'check.svg',
      'corrupt-header.jpg',
      'grey-plus-alpha.gif',
    ]) {
      copyFileSync(fixture(name), join(work, name));
    }
    const { stdout, stderr } = await run(
      process.execPath,
      [
        '--import',
        'tsx',
        'tools/calibrate/robustness-main.ts',
        '--dir',
        work,
        '--models',
        'mobilenet_v2',
        '--min-edge',
        '8',
      ],
      { cwd: ROOT, env: { ...childEnv(), TSX_DISABLE_CACHE: '1', LOG_LEVEL: 'warn' } },
    );
    expect(stderr).toMatch(
      /sharp could not read 1: corrupt-header\.jpg; 1 left out, an edge under 8 px: grey-plus-alpha\.gif/,
    );
    expect(stdout).toContain('images with both edges >= 8 px; originals scored: mobilenet_v2 2;');
    expect(stdout).toContain('allow < 0.1 <= review < 0.9 <= block');
    const rows = stdout.split('\n').filter((l) => l.startsWith('| mobilenet_v2 |'));
    expect(rows.map((r) => r.split(' | ')[1])).toEqual(VARIANTS.map((v) => v.name));
    for (const row of rows) expect(row).toMatch(/ \| \d+\.\d % \([0-2]\/2\) \| 0 \| /);
    // The same pixels stored losslessly score exactly the same: the PNG and the alpha variant.
    for (const name of ['png', 'alpha']) {
      expect(rows.find((r) => r.startsWith(`| mobilenet_v2 | ${name} |`))).toMatch(
        / \| 100\.0 % \(2\/2\) \| 0 \| 0 \| {2}\|$/,
      );
    }
    expect(stdout).toMatch(/\| \*\*mobilenet_v2\*\* \| \*\*all\*\* \| \*\*\d+\.\d % \(\d+\/18\)\*\* \| 0 \|/);
  }, 300_000);
});
