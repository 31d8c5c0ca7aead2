// The production scorer's two paths, with the real model: an ordinary JPEG or PNG is decoded in a
// scoring worker thread (no decoder process is started), a costly one in a decoder process; both give
// exactly the scores of decoding every image in a decoder process.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { hostileImage } from '../../../test/support/hostile-images.ts';
import { resolveJpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import { probeHeader } from '../image/probe.ts';
import { sniffFormat } from '../image/sniff.ts';
import { DEFAULT_DIMENSION_LIMITS, type ProbedImage } from '../image/types.ts';
import type { DecodePath } from './decode-route.ts';
import { DecoderPool } from './decoder-pool.ts';
import { RoutedScorer } from './routed-scorer.ts';
import { WorkerPoolScorer } from './worker-pool-scorer.ts';

const jpegDecoder = resolveJpegDecoder('auto');

async function load(bytes: Uint8Array) {
  return { bytes, probed: probeHeader(bytes, await sniffFormat(bytes)) };
}

describe('RoutedScorer', () => {
  let workers: WorkerPoolScorer;
  let decoders: DecoderPool;
  let routed: RoutedScorer;
  /** Every image through a decoder process: the scores the in-process path must reproduce. */
  let allIsolated: RoutedScorer;
  const routes: DecodePath[] = [];
  beforeAll(async () => {
    workers = await WorkerPoolScorer.create({
      model: 'mobilenet_v2',
      workers: 2,
      intraOpThreads: 1,
      limits: DEFAULT_DIMENSION_LIMITS,
      jpegDecoder,
      deadlineMs: 60_000,
    });
    decoders = await DecoderPool.create({
      processes: 2,
      inputSize: 224,
      limits: DEFAULT_DIMENSION_LIMITS,
      jpegDecoder,
      deadlineMs: 60_000,
      cpuLimitMs: 60_000,
      idleMs: 60_000,
    });
    routed = new RoutedScorer(decoders, workers, { maxPixels: 8_388_608 }, (route) =>
      routes.push(route.path),
    );
    allIsolated = new RoutedScorer(decoders, workers, { maxPixels: 0 });
  }, 120_000);
  afterAll(async () => {
    await routed?.close();
  });

  const score = (scorer: RoutedScorer, image: { bytes: Uint8Array; probed: ProbedImage }) =>
    scorer.score(new Uint8Array(image.bytes), image.probed);

  it('decodes ordinary JPEGs and PNGs in the worker threads (no decoder process), a costly JPEG in one, with the same scores', async () => {
    // A photo, a PNG with alpha, a long frame scored as tiles after its margins are trimmed.
    const ordinary = await Promise.all(
      [
        '320x240.jpg',
        '2569067123_aca715a2ee_o.jpg',
        'Flag_of_the_Netherlands-alpha.png',
        'image-in-alpha.png',
      ].map((name) => load(readFileSync(fixture(name)))),
    );
    const inProcess = await Promise.all(ordinary.map((image) => score(routed, image)));
    expect(routes).toEqual(Array(ordinary.length).fill('in-process'));
    expect(decoders.pids).toEqual([]);

    const costly = await load(await hostileImage('jpeg-noise-16mp'));
    const isolatedScore = await score(routed, costly);
    expect(routes.at(-1)).toBe('isolated');
    expect(decoders.pids).toHaveLength(1);

    // Bit-identical to decoding in a decoder process.
    const reference = await Promise.all([...ordinary, costly].map((image) => score(allIsolated, image)));
    expect([...inProcess, isolatedScore].map((s) => s.scores)).toEqual(reference.map((s) => s.scores));
  }, 120_000);
});
