// `npm run calibrate` refusing bad advice, end to end (the real CLI, the real model): on a made-up,
// poorly separated labelled folder (the same pictures in both labels) the point is flagged in the
// report, and no deployable file (values.yaml, thresholds.env, detection-policy.yaml) is written
// without --force (exit 1); with --force they are, still flagged. Every argument error is one line and
// exit 2, before anything is scored.

import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labelledCorpus } from './fixtures/corpus.ts';
import { calibrateCli } from './support/calibrate-cli.ts';

// The same six pictures labelled both ways: no threshold can tell the labels apart.
const SAME = [
  '320x240.jpg',
  '4.webp',
  'Landscape_1.jpg',
  'Flag_of_the_Netherlands.png',
  '5_webp_a.webp',
  '2x2_fdcce6.png',
];
const DEPLOYABLE = ['values.yaml', 'thresholds.env', 'detection-policy.yaml'];

let work: string;
beforeAll(() => {
  work = labelledCorpus('nsfwdetector-calibrate-advice-', { nsfw: SAME, sfw: SAME });
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

type Failed = { code: number; stdout: string; stderr: string };
const fails = (args: string[]) =>
  calibrateCli(args).then(
    () => {
      throw new Error('expected a failure');
    },
    (err: Failed) => err,
  );

describe('npm run calibrate: argument errors are one line and exit 2', () => {
  it.each([
    [['--sfw', 'x', '--out', 'y'], 'calibrate: --nsfw DIR is required (a folder of NSFW images)'],
    [
      ['--nsfw', '/no/such/folder', '--sfw', '/tmp', '--out', 'y'],
      'calibrate: --nsfw /no/such/folder: no such folder',
    ],
    [
      ['--nsfw', '/tmp', '--sfw', '/tmp'],
      'calibrate: --out REPORT_DIR is required (the folder the report is written to)',
    ],
    [
      ['--nsfw', '/tmp', '--sfw', '/tmp', '--out', 'y', '--target-miss', '2'],
      'calibrate: --target-miss must be a number in [0, 1], got 2',
    ],
    [
      ['--nsfw', '/tmp', '--sfw', '/tmp', '--out', 'y', '--target-review', '0.2'],
      'calibrate: --target-review applies to a comparison: give --models too',
    ],
  ])('%j', async (args, line) => {
    const err = await fails(args);
    expect(err.code).toBe(2);
    expect(err.stderr).toBe(`${line}\n`);
  });

  it('an unknown option', async () => {
    const err = await fails(['--nsfw', '/tmp', '--sfw', '/tmp', '--out', 'y', '--bogus']);
    expect(err.code).toBe(2);
    expect(err.stderr.trim().split('\n')).toHaveLength(1);
    expect(err.stderr).toMatch(/^calibrate: Unknown option '--bogus'/);
  });
});

describe('npm run calibrate on a poorly separated folder', () => {
  it('flags the point and writes no deployable file without --force (exit 1)', async () => {
    const out = join(work, 'refused');
    const err = await fails(['--nsfw', join(work, 'nsfw'), '--sfw', join(work, 'sfw'), '--out', out]);
    expect(err.code).toBe(1);
    expect(err.stderr).toContain(
      'flagged: too few images to suggest thresholds: 6 NSFW and 6 SFW scored, at least 30 of each are needed',
    );
    expect(err.stderr).toContain(
      'flagged: no values.yaml, thresholds.env or detection-policy.yaml written (--force writes them)',
    );
    for (const file of DEPLOYABLE) expect(existsSync(join(out, file)), file).toBe(false);
    const html = readFileSync(join(out, 'index.html'), 'utf8');
    expect(html).toContain('id="flagged"');
    expect(html).toContain('data-kind="too-few-images"');
    expect(html).toContain('id="operating-point"');
    const json = JSON.parse(readFileSync(join(out, 'thresholds.json'), 'utf8')) as {
      flagged: Array<{ kind: string }>;
      operatingPoint: { review: { low: number; high: number } };
    };
    expect(json.flagged.map((p) => p.kind)).toContain('too-few-images');
    expect(json.operatingPoint.review.high).toBeGreaterThanOrEqual(json.operatingPoint.review.low);
  }, 300_000);

  it('with --force writes them, still flagged (exit 0)', async () => {
    const out = join(work, 'forced');
    const result = await calibrateCli([
      '--nsfw',
      join(work, 'nsfw'),
      '--sfw',
      join(work, 'sfw'),
      '--out',
      out,
      '--force',
    ]);
    expect(result.stderr).toContain('flagged: deployable files written anyway (--force)');
    for (const file of DEPLOYABLE) expect(existsSync(join(out, file)), file).toBe(true);
    expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('Written anyway (--force)');
  }, 300_000);
});
