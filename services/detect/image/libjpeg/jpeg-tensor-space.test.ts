// The fast path against sharp over the space of JPEGs libjpeg writes (test/jpeg-space): for each, the
// fast path's tensor is bit-identical to sharp's decode + resizeToTensor, or the fast path declines; and
// with PDQ's filter fed the rows as they are decoded (the frame itself, or averaged over blocks first),
// the same tensor and the downsample the filter gives sharp's full decode.
// The fast path runs in a child process, so a decode that never returns fails the test (naming the
// file) instead of wedging the run. Every run decodes a representative subset (one sampling of each
// class, modes and sizes crossed); JPEG_SPACE=full decodes every sampling in every mode (minutes),
// JPEG_SPACE_ROTATION=<n> picks other members of each class.

import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { isApiError } from '../../../../lib/common/errors.ts';
import { fastPathInChild, PDQ_SIDES } from '../../../../test/jpeg-space/fast-path-runner.ts';
import {
  allCases,
  buildMakeJpeg,
  caseLabel,
  incompleteAndManyScanCases,
  type JpegCase,
  MODES,
  makeJpegs,
  maxVertical,
  representativeCases,
  SIZES,
  samplingClass,
  samplings,
} from '../../../../test/jpeg-space/jpeg-space.ts';
import { C_COMPILER, describeWithTool, JPEG_TENSOR_ADDON } from '../../../../test/support/tools.ts';
import { decodeRgb, toModelInput } from '../decode.ts';
import { MAX_JPEG_SCANS } from '../image-cost.ts';
import { probeHeader } from '../probe.ts';
import { DEFAULT_DIMENSION_LIMITS } from '../types.ts';
import { jpegToTensor, pdqDownsample } from './jpeg-tensor.ts';

const SIZE = 224;
const MAX_PIXELS = DEFAULT_DIMENSION_LIMITS.jpeg.maxPixels;
const BATCH = 150;

const digest = (t: Float32Array) =>
  createHash('sha256')
    .update(new Uint8Array(t.buffer, t.byteOffset, t.byteLength))
    .digest('hex');

async function sharpOutcome(bytes: Buffer) {
  try {
    const probed = probeHeader(bytes, 'jpeg');
    const input = await toModelInput(bytes, probed, SIZE, { jpegDecoder: 'sharp' });
    const { rgb, width, height } = await decodeRgb(bytes, probed, { shrinkOnLoad: false });
    const pdq = new Map<number, string>(
      PDQ_SIDES.map((side) => {
        const downsample = pdqDownsample(rgb, width, height, side);
        return [side, downsample ? digest(downsample) : 'none'];
      }),
    );
    return {
      width: input.decodedWidth,
      height: input.decodedHeight,
      sha256: digest(input.tensor),
      pdq,
      input,
    };
  } catch (err) {
    if (!isApiError(err)) throw err;
    return { code: err.code };
  }
}

/** The largest element difference, for the message (the fast path finished on this file in the child). */
function largestDifference(bytes: Buffer, sharpTensor: Float32Array): number {
  const fast = jpegToTensor(bytes, SIZE, MAX_PIXELS);
  if (typeof fast === 'string') return Number.NaN;
  let worst = 0;
  for (let i = 0; i < fast.tensor.length; i++)
    worst = Math.max(worst, Math.abs((fast.tensor[i] ?? 0) - (sharpTensor[i] ?? 0)));
  return worst;
}

interface Verdict {
  taken: number;
  declined: Map<string, string[]>;
  failures: string[];
}

/** Writes, decodes (fast path in a child, sharp here) and compares `cases`, a batch at a time. */
async function compare(cases: readonly JpegCase[], dir: string, makeJpeg: string): Promise<Verdict> {
  const verdict: Verdict = { taken: 0, declined: new Map(), failures: [] };
  for (let first = 0; first < cases.length; first += BATCH) {
    const batch = cases.slice(first, first + BATCH);
    const paths = makeJpegs(makeJpeg, batch, dir, first);
    const results = await fastPathInChild(paths, SIZE, MAX_PIXELS, dir);
    const label = (i: number) => caseLabel(batch[i] as JpegCase);
    for (const [i, fast] of results.entries()) {
      const bytes = readFileSync(paths[i] ?? '');
      if ('hung' in fast) {
        verdict.failures.push(`${label(i)}: the fast path never returned (killed)`);
        continue;
      }
      if ('crashed' in fast) {
        verdict.failures.push(`${label(i)}: the fast path's process died: ${fast.crashed}`);
        continue;
      }
      if ('declined' in fast) {
        verdict.declined.set(fast.declined, [...(verdict.declined.get(fast.declined) ?? []), label(i)]);
        continue;
      }
      verdict.taken++;
      const slow = await sharpOutcome(bytes);
      if ('code' in slow)
        verdict.failures.push(`${label(i)}: taken by the fast path, sharp fails (${slow.code})`);
      else if (slow.width !== fast.width || slow.height !== fast.height)
        verdict.failures.push(
          `${label(i)}: ${fast.width}x${fast.height}, sharp ${slow.width}x${slow.height}`,
        );
      else if (slow.sha256 !== fast.sha256)
        verdict.failures.push(
          `${label(i)}: tensors differ (largest difference ${largestDifference(bytes, slow.input.tensor)})`,
        );
      else
        for (const hashed of fast.withPdq) {
          const what = `${label(i)}, PDQ reduce side ${hashed.side}`;
          if ('declined' in hashed)
            verdict.failures.push(`${what}: taken, declined with PDQ (${hashed.declined})`);
          else if (hashed.sha256 !== fast.sha256)
            verdict.failures.push(`${what}: the tensor differs when PDQ reads rows too`);
          else if (hashed.pdq !== slow.pdq.get(hashed.side))
            verdict.failures.push(`${what}: PDQ's downsample differs from the one of sharp's decode`);
        }
    }
    for (const p of paths) rmSync(p, { force: true });
  }
  return verdict;
}

describeWithTool([JPEG_TENSOR_ADDON, C_COMPILER], 'libjpeg fast path over the JPEG space', () => {
  let dir = '';
  let makeJpeg = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'jpeg-space-'));
    makeJpeg = buildMakeJpeg(dir);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  // Luma sampled 4x vertically beside a 2x chroma: libjpeg-turbo's row skipping loses an iMCU row
  // (jpeg-decode.c says why), which loops forever on multi-scan files and gives wrong pixels for
  // arithmetic-coded ones. Such files are read without skipping: taken, and exact.
  // (The timeout is for the code this guards against: each hang costs the runner's stall bound.)
  it('4x vertical luma beside 2x vertical chroma, 1000 and 2000 rows: no hang, sharp’s pixels', {
    timeout: 600_000,
  }, async () => {
    const cases: JpegCase[] = [];
    for (const sampling of ['1x4,1x2,1x1', '2x4,1x2,1x1', '4x4,2x2,1x1'])
      for (const height of [1000, 2000])
        for (const mode of MODES.slice(0, 4))
          cases.push({ sampling, ...mode, width: 96, height, seed: height });
    const verdict = await compare(cases, dir, makeJpeg);
    expect(verdict.failures).toEqual([]);
    expect(Object.fromEntries(verdict.declined)).toEqual({});
    expect(verdict.taken).toBe(cases.length);
  });

  // Progressions that leave coefficients incomplete: libjpeg-turbo smooths their blocks, the system
  // library and sharp's differently (tensors up to 0.043 apart): declined, so sharp decodes them. And
  // the many-scan progressions (hundreds of scans): declined at the scan limit.
  it('incomplete and many-scan progressions: declined, never taken with other pixels', {
    timeout: 600_000,
  }, async () => {
    const cases = incompleteAndManyScanCases();
    const verdict = await compare(cases, dir, makeJpeg);
    expect(verdict.failures).toEqual([]);
    const incomplete = cases.filter((c) => c.scans === 'incomplete').map(caseLabel);
    const many = cases.filter((c) => c.scans === 'many').map(caseLabel);
    expect(Object.fromEntries(verdict.declined)).toEqual({
      'progressive coefficients incomplete': incomplete,
      [`more than ${MAX_JPEG_SCANS} scans`]: many,
    });
    expect(verdict.taken).toBe(0);
  });

  it('the subset covers every class, mode and size, and each mode with every largest vertical factor', () => {
    const cases = representativeCases();
    const classes = new Set(samplings().map(samplingClass));
    expect(new Set(cases.map((c) => samplingClass(c.sampling)))).toEqual(classes);
    expect(cases.length).toBe(classes.size);
    const modeOf = (c: JpegCase) => `${c.scans} ${c.coding} ${c.restart}`;
    expect(new Set(cases.map(modeOf)).size).toBe(MODES.length);
    expect(new Set(cases.map((c) => `${c.width}x${c.height}`)).size).toBe(SIZES.length);
    const pairs = new Set(cases.map((c) => `${modeOf(c)} v${maxVertical(c.sampling)}`));
    expect(pairs.size).toBe(MODES.length * 4);
  });

  const full = process.env.JPEG_SPACE === 'full';
  const rotation = Number(process.env.JPEG_SPACE_ROTATION ?? 0);
  it(full
    ? 'every sampling in every mode: sharp’s pixels or declined'
    : 'a sampling of each class: sharp’s pixels or declined', {
    timeout: full ? 3_600_000 : 600_000,
  }, async () => {
    const cases = full ? allCases() : representativeCases(rotation);
    const verdict = await compare(cases, dir, makeJpeg);
    expect(verdict.failures).toEqual([]);
    // Every file here is plain 8-bit YCbCr or greyscale that libjpeg wrote: nothing to decline.
    expect(Object.fromEntries(verdict.declined)).toEqual({});
    expect(verdict.taken).toBe(cases.length);
  });
});
