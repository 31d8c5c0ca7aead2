// The worker pool against the in-process unit of work it runs: same scores, errors carried across
// the thread boundary with their code, and refusal after close.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { ApiError } from '../../common/errors.ts';
import { probeHeader } from '../image/probe.ts';
import { sniffFormat } from '../image/sniff.ts';
import { DEFAULT_DIMENSION_LIMITS } from '../image/types.ts';
import { createOnnxClassifier } from '../model/onnx-classifier.ts';
import { InProcessScorer } from './image-scorer.ts';
import { WorkerPoolScorer } from './worker-pool-scorer.ts';

async function load(name: string) {
  const bytes = readFileSync(fixture(name));
  return { bytes, probed: probeHeader(bytes, await sniffFormat(bytes)) };
}

describe('WorkerPoolScorer', () => {
  let pool: WorkerPoolScorer;
  let local: InProcessScorer;
  beforeAll(async () => {
    pool = await WorkerPoolScorer.create({
      model: 'mobilenet_v2',
      workers: 2,
      intraOpThreads: 1,
      limits: DEFAULT_DIMENSION_LIMITS,
    });
    local = new InProcessScorer(await createOnnxClassifier({ model: 'mobilenet_v2' }));
  });
  afterAll(async () => {
    await pool?.close();
    await local?.close();
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
    const spare = await WorkerPoolScorer.create({
      model: 'mobilenet_v2',
      workers: 1,
      intraOpThreads: 1,
      limits: DEFAULT_DIMENSION_LIMITS,
    });
    await spare.close();
    const { bytes, probed } = await load('320x240.jpg');
    await expect(spare.score(bytes, probed)).rejects.toMatchObject({ code: 5001 });
  });

  it('answers 5001 for the image whose worker died, replaces the worker, and keeps serving', async () => {
    const replaced: Error[] = [];
    const supervised = await WorkerPoolScorer.create({
      model: 'mobilenet_v2',
      workers: 1,
      intraOpThreads: 1,
      limits: DEFAULT_DIMENSION_LIMITS,
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
});
