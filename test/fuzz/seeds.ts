// What both fuzzers start from, and where their findings go. Seeds: the JPEG space's representative
// files (test/jpeg-space, at fuzzing-friendly sizes), the shared corpus's files up to 256 KB (every
// format; JPEGs only for the native target), and BMPs of each header and encoding the decoder reads
// (the corpus has none). Findings: test-artifacts/fuzz/<fuzzer>/ (gitignored), kept after the run.

import { copyFileSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BI, buildBmp, packRows } from '../fixtures/bmp.ts';
import { CORPUS, fixture } from '../fixtures/corpus.ts';
import {
  buildMakeJpeg,
  incompleteAndManyScanCases,
  type JpegCase,
  makeJpegs,
  representativeCases,
} from '../jpeg-space/jpeg-space.ts';
import { hostileSeeds } from '../support/hostile-images.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** How long each fuzzer runs in `npm test`; FUZZ_SECONDS=3600 for a longer campaign. */
export const FUZZ_SECONDS = Number(process.env.FUZZ_SECONDS ?? 60);

export function artifactsDir(fuzzer: string): string {
  const dir = join(ROOT, 'test-artifacts', 'fuzz', fuzzer);
  mkdirSync(dir, { recursive: true });
  return dir;
}

const MAX_SEED_BYTES = 256 * 1024;

/**
 * The representative JPEGs and the incomplete and many-scan progressions, no larger than 48 × 300 (the
 * tall ones still make the fast path skip rows).
 */
export function writeJpegSeeds(dir: string, buildDir: string): number {
  const cases: JpegCase[] = [...representativeCases(), ...incompleteAndManyScanCases()].map((c) => ({
    ...c,
    width: Math.min(c.width, 48),
    height: Math.min(c.height, 300),
  }));
  makeJpegs(buildMakeJpeg(buildDir), cases, dir);
  return cases.length;
}

/** Copies the corpus files up to 256 KB whose names pass `keep`; returns how many. */
export function writeCorpusSeeds(dir: string, keep: (name: string) => boolean = () => true): number {
  let n = 0;
  for (const name of Object.keys(CORPUS)) {
    const path = fixture(name);
    if (!keep(name) || statSync(path).size > MAX_SEED_BYTES) continue;
    copyFileSync(path, join(dir, `corpus-${name}`));
    n++;
  }
  return n;
}

export const isJpegName = (name: string) => /\.jpe?g$/i.test(name);

/** The hostile shapes' small files (hostile-images.ts): many-scan progressions, metadata-heavy files. */
export function writeHostileSeeds(
  dir: string,
  keep: (format: 'jpeg' | 'png') => boolean = () => true,
): number {
  const seeds = hostileSeeds().filter((s) => keep(s.format));
  for (const seed of seeds) writeFileSync(join(dir, `hostile-${seed.name}`), seed.bytes);
  return seeds.length;
}

/** BMPs of every header size and pixel encoding decodeBmp supports. */
export function writeBmpSeeds(dir: string): number {
  const palette: [number, number, number][] = [
    [255, 0, 0],
    [0, 255, 0],
    [0, 0, 255],
    [255, 255, 255],
  ];
  const rows = (bpp: number, width: number, height: number, top = false) =>
    packRows(
      Array.from({ length: height }, (_, y) =>
        Array.from({ length: width }, (_, x) => (x * 7 + y * 3) % Math.min(2 ** bpp, 0xffffff)),
      ),
      bpp,
      top,
    );
  const bmps: Buffer[] = [];
  for (const header of ['core', 'os2-16', 'info', 'v2', 'v3', 'os2-64', 'v4', 'v5'] as const)
    for (const bpp of [1, 4, 8, 24]) {
      const height = header === 'core' ? 3 : -3; // the core header has unsigned heights
      bmps.push(
        buildBmp({
          header,
          width: 5,
          height,
          bpp,
          palette: bpp <= 8 ? palette : undefined,
          pixelData: rows(bpp, 5, 3, height < 0),
        }),
      );
    }
  bmps.push(buildBmp({ width: 4, height: 2, bpp: 16, pixelData: rows(16, 4, 2) }));
  bmps.push(buildBmp({ width: 4, height: 2, bpp: 32, pixelData: rows(32, 4, 2) }));
  for (const [bpp, masks] of [
    [16, [0xf800, 0x07e0, 0x001f, 0]],
    [32, [0xff0000, 0xff00, 0xff, 0xff000000]],
  ] as const) {
    for (const header of ['info', 'v5'] as const)
      bmps.push(
        buildBmp({
          header,
          width: 4,
          height: 2,
          bpp,
          compression: BI.BITFIELDS,
          masks: [...masks],
          pixelData: rows(bpp, 4, 2),
        }),
      );
  }
  // RLE8 and RLE4: a run, an absolute run, a delta, end of line, end of bitmap.
  const rle8 = Uint8Array.from([3, 1, 0, 3, 2, 3, 1, 0, 0, 2, 1, 0, 0, 0, 2, 2, 0, 1]);
  const rle4 = Uint8Array.from([4, 0x12, 0, 4, 0x31, 0x20, 0, 0, 0, 2, 1, 0, 0, 0, 2, 0x33, 0, 1]);
  bmps.push(buildBmp({ width: 6, height: 3, bpp: 8, compression: BI.RLE8, palette, pixelData: rle8 }));
  bmps.push(buildBmp({ width: 6, height: 3, bpp: 4, compression: BI.RLE4, palette, pixelData: rle4 }));
  bmps.forEach((bmp, i) => {
    writeFileSync(join(dir, `bmp-${i}.bmp`), bmp);
  });
  return bmps.length;
}
