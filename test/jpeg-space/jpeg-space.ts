// The space of JPEGs libjpeg writes and the fast path must decode exactly as sharp does: every sampling
// factor combination libjpeg accepts for 1 and 3 components (h, v in 1..4, each dividing the largest:
// libjpeg's up- and downsamplers refuse fractions), each scan structure and entropy coding, with and
// without restart intervals, from 1 px to tall and wide. make-jpeg.c writes them with libjpeg itself.
//
// `representativeCases` is the bounded subset every test run decodes: one sampling combination of each
// class the decoder tells apart (the set of per-component upsampling ratios, the largest vertical
// factor, whether an MCU fits one interleaved scan), every greyscale one, with the scan modes and sizes
// crossed over them. `allCases` is every combination in every mode (JPEG_SPACE=full, a longer sweep).

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SOURCE = fileURLToPath(new URL('make-jpeg.c', import.meta.url));

/** `incomplete` and `many` are progressions no plain encoder writes: coefficients left without all their
 * bits (libjpeg-turbo then smooths blocks, differently in each release) and one coefficient a scan with
 * every refinement (hundreds of scans). They are not in MODES: INCOMPLETE_AND_MANY_SCAN_CASES has them. */
export type Scans = 'sequential' | 'separate' | 'progressive' | 'incomplete' | 'many';
export type Coding = 'huffman' | 'arithmetic';

export interface JpegCase {
  /** Component sampling as libjpeg's cjpeg writes it: "2x2,1x1,1x1" (YCbCr) or "1x4" (greyscale). */
  sampling: string;
  scans: Scans;
  coding: Coding;
  /** Restart interval in MCUs (0: none). */
  restart: number;
  width: number;
  height: number;
  seed: number;
}

export const MODES: ReadonlyArray<Pick<JpegCase, 'scans' | 'coding' | 'restart'>> = [
  { scans: 'sequential', coding: 'huffman', restart: 0 },
  { scans: 'progressive', coding: 'huffman', restart: 0 },
  { scans: 'sequential', coding: 'arithmetic', restart: 0 },
  { scans: 'progressive', coding: 'arithmetic', restart: 0 },
  { scans: 'separate', coding: 'huffman', restart: 0 },
  { scans: 'sequential', coding: 'huffman', restart: 1 },
  { scans: 'separate', coding: 'arithmetic', restart: 3 },
];

/**
 * The progressive shapes no plain encoder writes, over one sampling of each kind (grey, 4:4:4, 4:2:0,
 * 4:2:2, one that does not fit an interleaved MCU) and sizes that make the fast path skip rows: every
 * `incomplete` variant (the seed picks it) in both codings, and `many` (694 scans grey, 2,080 colour).
 */
export function incompleteAndManyScanCases(): JpegCase[] {
  const cases: JpegCase[] = [];
  const samplingsOf = ['1x1', '1x1,1x1,1x1', '2x2,1x1,1x1', '2x1,1x1,1x1', '4x2,1x1,2x2'];
  const sizes: Array<[number, number]> = [
    [67, 45],
    [250, 260],
    [40, 1000],
  ];
  for (const [i, sampling] of samplingsOf.entries())
    for (const [j, [width, height]] of sizes.entries()) {
      for (let variant = 0; variant < 4; variant++)
        cases.push({
          sampling,
          scans: 'incomplete',
          coding: variant % 2 ? 'arithmetic' : 'huffman',
          restart: 0,
          width,
          height,
          seed: 4 * (i * sizes.length + j) + variant + 4,
        });
      cases.push({ sampling, scans: 'many', coding: 'huffman', restart: 0, width, height, seed: i + 1 });
    }
  return cases;
}

/** Heights over the model input (224) make the fast path skip rows; 2 px wide makes chroma 1 px wide. */
export const SIZES: ReadonlyArray<readonly [number, number]> = [
  [1, 1],
  [3, 2],
  [17, 9],
  [2, 700],
  [67, 45],
  [40, 1000],
  [1000, 40],
  [250, 260],
  [13, 2000],
];

type Factor = readonly [number, number];

const FACTORS: Factor[] = [];
for (let h = 1; h <= 4; h++) for (let v = 1; v <= 4; v++) FACTORS.push([h, v]);

const format = (factors: readonly Factor[]) => factors.map(([h, v]) => `${h}x${v}`).join(',');

/** Every sampling libjpeg accepts: 16 greyscale, and the YCbCr ones whose factors divide the largest. */
export function samplings(): string[] {
  const out = FACTORS.map((f) => format([f]));
  for (const y of FACTORS)
    for (const cb of FACTORS)
      for (const cr of FACTORS) {
        const all = [y, cb, cr];
        const maxH = Math.max(...all.map((f) => f[0]));
        const maxV = Math.max(...all.map((f) => f[1]));
        if (all.every(([h, v]) => maxH % h === 0 && maxV % v === 0)) out.push(format(all));
      }
  return out;
}

function parse(sampling: string): Factor[] {
  return sampling.split(',').map((f) => {
    const [h, v] = f.split('x').map(Number);
    return [h ?? 0, v ?? 0] as const;
  });
}

/** What the decoder's choices depend on: components, upsampling ratios (as a set), max v, MCU fit. */
export function samplingClass(sampling: string): string {
  const factors = parse(sampling);
  const maxH = Math.max(...factors.map((f) => f[0]));
  const maxV = Math.max(...factors.map((f) => f[1]));
  const ratios = factors.map(([h, v]) => `${maxH / h}:${maxV / v}`).sort();
  const blocks = factors.reduce((sum, [h, v]) => sum + h * v, 0);
  return `${factors.length}c ratios ${ratios.join(' ')} maxV ${maxV} ${blocks <= 10 ? 'fits' : 'separate'}`;
}

export function maxVertical(sampling: string): number {
  return Math.max(...parse(sampling).map((f) => f[1]));
}

/** One sampling of each class (the `rotation`-th member, so another rotation picks others), with the
 * modes taken in turn within each largest vertical factor (the skipping's main variable) and the sizes
 * taken in turn over all. */
export function representativeCases(rotation = 0): JpegCase[] {
  const classes = new Map<string, string[]>();
  for (const s of samplings()) {
    const key = samplingClass(s);
    classes.set(key, [...(classes.get(key) ?? []), s]);
  }
  const perMaxV = new Map<number, number>();
  return [...classes.values()].map((members, i) => {
    const sampling = members[(rotation + i) % members.length] ?? '1x1';
    const v = maxVertical(sampling);
    const j = perMaxV.get(v) ?? 0;
    perMaxV.set(v, j + 1);
    const [width, height] = SIZES[(i + Math.floor(i / SIZES.length)) % SIZES.length] ?? [1, 1];
    return { sampling, ...(MODES[j % MODES.length] ?? MODES[0]), width, height, seed: i + 1 } as JpegCase;
  });
}

/** Every sampling in every mode, the sizes taken in turn. */
export function allCases(): JpegCase[] {
  const out: JpegCase[] = [];
  for (const sampling of samplings())
    for (const mode of MODES) {
      const [width, height] = SIZES[out.length % SIZES.length] ?? [1, 1];
      out.push({ sampling, ...mode, width, height, seed: out.length + 1 });
    }
  return out;
}

export function caseLabel(c: JpegCase): string {
  const restart = c.restart ? ` restart ${c.restart}` : '';
  return `${c.sampling} ${c.scans} ${c.coding}${restart} ${c.width}x${c.height}`;
}

/** Compiles make-jpeg.c into `dir`; returns the program's path. Needs cc and libjpeg's headers. */
export function buildMakeJpeg(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const program = join(dir, 'make-jpeg');
  execFileSync(
    process.env.CC ?? 'cc',
    ['-O2', '-std=c11', '-Wall', '-Wextra', '-Werror', SOURCE, '-o', program, '-ljpeg'],
    { stdio: ['ignore', 'inherit', 'pipe'] },
  );
  return program;
}

/** Writes each case as `<dir>/<index>.jpg` (quality 90); returns the paths, in order. */
export function makeJpegs(program: string, cases: readonly JpegCase[], dir: string, first = 0): string[] {
  const paths = cases.map((_, i) => join(dir, `${first + i}.jpg`));
  const lines = cases.map(
    (c, i) =>
      `${paths[i]} ${c.width} ${c.height} ${c.sampling} ${c.scans} ${c.coding} ${c.restart} 90 ${c.seed}\n`,
  );
  mkdirSync(dir, { recursive: true });
  const run = spawnSync(program, [], { input: lines.join(''), encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`make-jpeg failed (${run.status ?? run.signal}): ${run.stderr}`);
  return paths;
}
