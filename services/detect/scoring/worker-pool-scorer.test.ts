// The worker pool against the in-process unit of work it runs: same scores, errors carried across
// the thread boundary with their code, and refusal after close.

import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../../lib/common/errors.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { stuckThreadCount } from '../../../lib/common/stuck-threads.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { eventually } from '../../../test/support/eventually.ts';
import type { ImagePdq } from '../image/pdq.ts';
import { probeHeader } from '../image/probe.ts';
import { restrictSharpLoaders } from '../image/sharp-restrictions.ts';
import { sniffFormat } from '../image/sniff.ts';
import { DEFAULT_DIMENSION_LIMITS } from '../image/types.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from './image-scorer.ts';
import { type WorkerPoolOptions, WorkerPoolScorer } from './worker-pool-scorer.ts';

/** Far above what any image here takes: only the deadline tests below pass theirs. */
const DEADLINE_MS = 60_000;

/** A pool of the real model's workers (or `entry`'s stand-ins): one worker, one thread, unless said. */
const poolOf = (opts: Partial<WorkerPoolOptions> = {}) =>
  WorkerPoolScorer.create({
    model: 'mobilenet_v2',
    workers: 1,
    intraOpThreads: 1,
    limits: DEFAULT_DIMENSION_LIMITS,
    deadlineMs: DEADLINE_MS,
    ...opts,
  });

async function load(name: string) {
  const bytes = readFileSync(fixture(name));
  return { bytes, probed: probeHeader(bytes, await sniffFormat(bytes)) };
}

describe('WorkerPoolScorer', () => {
  let pool: WorkerPoolScorer;
  let local: InProcessScorer;
  beforeAll(async () => {
    pool = await poolOf({ workers: 2 });
    // Margins trimmed and long frames tiled, as the workers do.
    local = new InProcessScorer(
      await createOnnxClassifier({ model: 'mobilenet_v2' }),
      undefined,
      undefined,
      SETTINGS.MAX_TILES.default,
    );
  });
  afterAll(async () => {
    await pool?.close();
    await local?.close();
  });

  it("restricted sharp's loaders from the main thread before its workers started", async () => {
    // Nothing on this thread decoded before the pool was made: the pool did it.
    expect(restrictSharpLoaders()).toBe(false);
    const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>');
    await expect(sharp(svg).raw().toBuffer()).rejects.toThrow(/unsupported image format/);
  });

  it('scores like the in-process scorer, several images at once', async () => {
    const names = ['320x240.jpg', 'Flag_of_the_Netherlands-alpha.png', 'animated-loop-3.webp', 'G31D.TIF'];
    const inputs = await Promise.all(names.map(load));
    const expected = await Promise.all(inputs.map((i) => local.score(i.bytes, i.probed)));
    // Copies: the pool takes ownership of (transfers) the buffers it is handed.
    const pooled = await Promise.all(inputs.map((i) => pool.score(new Uint8Array(i.bytes), i.probed)));
    pooled.forEach((p, k) => {
      for (const [cls, value] of Object.entries(expected[k]?.scores ?? {})) {
        expect(p.scores[cls as keyof typeof p.scores]).toBeCloseTo(value, 6);
      }
      expect(p.decodeMs).toBeGreaterThan(0);
      expect(p.inferenceMs).toBeGreaterThan(0);
    });
  });

  it('carries a decode failure across the thread boundary as the same ApiError code', async () => {
    // Cut inside the scan data: the header still probes, the decoder fails in the worker.
    const whole = readFileSync(fixture('320x240.jpg'));
    const bytes = whole.subarray(0, Math.floor(whole.length * 0.6));
    const probed = probeHeader(bytes, 'jpeg');
    const err = await pool.score(new Uint8Array(bytes), probed).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 400, code: 4005 });
  });

  it('refuses work once closed, with 5001', async () => {
    const spare = await poolOf();
    await spare.close();
    const { bytes, probed } = await load('320x240.jpg');
    await expect(spare.score(bytes, probed)).rejects.toMatchObject({ code: 5001 });
  });

  it('answers 5001 for the image whose worker died, replaces the worker, and keeps serving', async () => {
    const replaced: Error[] = [];
    const supervised = await poolOf({
      entry: new URL('../../../test/support/dying-scorer-worker.mjs', import.meta.url),
      onWorkerError: (err) => replaced.push(err),
    });
    try {
      const probed = { format: 'png' as const, width: 13, height: 13, frames: 1 };
      await expect(supervised.score(new Uint8Array(8), probed)).rejects.toMatchObject({
        status: 503,
        code: 5001,
      });
      expect(replaced).toHaveLength(1);
      expect(replaced[0]?.message).toMatch(/exited with code 70/);
      // The replacement takes the next image (queued until it is ready).
      const next = await supervised.score(new Uint8Array(8), { ...probed, width: 14 });
      expect(next.scores.neutral).toBe(1);
    } finally {
      await supervised.close();
    }
  });

  describe('scheduling (stand-in workers that report what they held)', () => {
    const entry = new URL('../../../test/support/recording-scorer-worker.mjs', import.meta.url);
    /** An image the stand-in holds for `ms`; `megapixels` decides whether it counts as large. */
    const image = (ms: number, megapixels = 1) => ({
      bytes: new Uint8Array(16),
      probed: { format: 'png' as const, width: megapixels * 1000, height: 1000, frames: ms },
    });
    const create = (workers: number, jobsPerWorker: number) =>
      poolOf({ workers, jobsPerWorker, intraOpThreads: 2, entry });

    it('gives an image that finds the pool empty the multi-threaded session, and none to the others', async () => {
      const p = await create(2, 2);
      try {
        const lone = await p.score(image(1).bytes, image(1).probed);
        expect(lone.scores).toMatchObject({ neutral: 1, drawing: 2 });
        const together = await Promise.all([1, 2, 3].map(() => p.score(image(30).bytes, image(30).probed)));
        // The first found the pool empty; the two sent while it was in flight did not.
        expect(together.map((r) => r.scores.neutral)).toEqual([1, 0, 0]);
        // Exactly one worker holds the multi-threaded session.
        expect(new Set(together.map((r) => r.scores.drawing))).toEqual(new Set([1, 2]));
      } finally {
        await p.close();
      }
    });

    it('holds up to jobsPerWorker images per worker, spread over the workers; the rest wait', async () => {
      const p = await create(2, 2);
      try {
        const results = await Promise.all(
          Array.from({ length: 6 }, () => p.score(image(40).bytes, image(40).probed)),
        );
        const held = results.map((r) => r.scores.porn ?? Number.NaN);
        expect(Math.max(...held)).toBe(2);
        // The first four went out at once (two per worker), the last two after.
        expect(held.slice(0, 4).sort()).toEqual([1, 1, 2, 2]);
      } finally {
        await p.close();
      }
    });

    /** Two large images then a small one, each sent at once; returns their results and finishing order. */
    async function largeLargeSmall(workers: number) {
      const p = await create(workers, 2);
      try {
        const order: string[] = [];
        const run = (name: string, ms: number, megapixels: number) =>
          p.score(image(ms, megapixels).bytes, image(ms, megapixels).probed).then((r) => {
            order.push(name);
            return r.scores;
          });
        // 12 MP × 3 bytes is over the large-image threshold.
        const scores = await Promise.all([
          run('large-a', 60, 12),
          run('large-b', 10, 12),
          run('small', 10, 1),
        ]);
        return { scores, order };
      } finally {
        await p.close();
      }
    }

    it('keeps large images to half the workers, letting small ones past a waiting large one', async () => {
      const { scores, order } = await largeLargeSmall(2);
      // large-b waited for large-a although the other worker was free; the small image took that one.
      expect(order).toEqual(['small', 'large-a', 'large-b']);
      expect(scores.map((s) => s.sexy)).toEqual([1, 1, 0]);
      expect(scores[2]?.porn).toBe(1);
    });

    it('keeps large images to one per worker, letting small ones past a waiting large one', async () => {
      const { scores, order } = await largeLargeSmall(1);
      // The small image overtook large-b and shared the worker with large-a.
      expect(order).toEqual(['small', 'large-a', 'large-b']);
      expect(scores.map((s) => s.sexy)).toEqual([1, 1, 1]);
      expect(scores[2]?.porn).toBe(2);
    });
  });
});

describe('WorkerPoolScorer deadline (stand-in workers that hang)', () => {
  const entry = new URL('../../../test/support/hanging-scorer-worker.mjs', import.meta.url);
  const image = (width: number, bytes = new Uint8Array(8)) => ({
    bytes,
    probed: { format: 'png' as const, width, height: 10, frames: 1 },
  });
  const create = (replaced: Error[]) =>
    poolOf({ entry, deadlineMs: 300, onWorkerError: (err) => replaced.push(err) });

  it('terminates a worker that holds an image past the deadline, answers 5001, and a fresh worker serves the next', async () => {
    const replaced: Error[] = [];
    const pool = await create(replaced);
    try {
      const spinning = image(21);
      const err = await pool.score(spinning.bytes, spinning.probed).catch((e: unknown) => e);
      expect(err).toMatchObject({ status: 503, code: 5001, headers: { 'retry-after': '1' } });
      expect((err as Error).message).toMatch(/did not finish within 0.3 s/);
      expect(replaced[0]?.message).toMatch(/past the 300 ms deadline/);
      const next = image(10);
      expect((await pool.score(next.bytes, next.probed)).scores.neutral).toBe(1);
      expect(pool.state).toBe('ready');
      expect(stuckThreadCount()).toBe(0);
    } finally {
      await pool.close();
    }
  });

  it('counts a worker blocked in native code as stuck, reports the pool wedged, and keeps scoring', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nsfwd-fifo-'));
    const fifo = join(dir, 'hold');
    execFileSync('mkfifo', [fifo]);
    const replaced: Error[] = [];
    const pool = await create(replaced);
    let released = false;
    // Opening the write end lets the blocked open() in the worker return; the worker then ends. ENXIO:
    // no reader yet — on a loaded host the worker can be counted stuck before it reaches its open() —
    // so it is tried again until the thread has ended.
    const release = () => {
      if (released) return;
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
        released = true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENXIO') throw err;
      }
    };
    try {
      const blocked = image(22, new TextEncoder().encode(fifo));
      await expect(pool.score(blocked.bytes, blocked.probed)).rejects.toMatchObject({ code: 5001 });
      // The replacement scores while the old thread is still blocked.
      const next = image(10);
      expect((await pool.score(next.bytes, next.probed)).scores.neutral).toBe(1);
      await eventually('the blocked worker counted as stuck', async () =>
        pool.state === 'wedged' ? true : undefined,
      );
      expect(stuckThreadCount()).toBe(1);
      expect(replaced.map((e) => e.message)).toContainEqual(expect.stringMatching(/stuck/));
      await eventually('the stuck thread to end', async () => {
        release();
        return stuckThreadCount() === 0 ? true : undefined;
      });
      expect(pool.state).toBe('ready');
    } finally {
      release();
      await pool.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

it("tells of an image's PDQ before its answer (matching runs meanwhile): the answer's own PDQ", async () => {
  const pool = await poolOf({ pdq: true });
  try {
    const { bytes, probed } = await load('320x240.jpg');
    const told: ImagePdq[] = [];
    const scored = await pool.score(new Uint8Array(bytes), probed, undefined, { onPdq: (p) => told.push(p) });
    expect(scored.pdq?.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(told).toEqual([scored.pdq]);
    // Not asked: nothing told, the answer still has it.
    const quiet = await pool.score(new Uint8Array(bytes), probed);
    expect(quiet.pdq).toEqual(scored.pdq);
    expect(told).toHaveLength(1);
    // This image not to be hashed (PDQ_HASHES=auto with no list in force): no PDQ, none told.
    const unhashed = await pool.score(new Uint8Array(bytes), probed, undefined, {
      pdq: false,
      onPdq: (p) => told.push(p),
    });
    expect(unhashed.pdq).toBeUndefined();
    expect(unhashed.scores).toEqual(scored.scores);
    expect(told).toHaveLength(1);
  } finally {
    await pool.close();
  }
});
