// The decoder processes: the same model inputs as a decode on the calling thread; a decode failure
// keeps its code; and kills under legitimate load — an image that costs far
// more CPU than any ordinary one, sent again and again beside legitimate images at a short limit.
// Every kill is answered 4005 (the image's own cost), every legitimate image in flight is decoded
// exactly, and the killed process's memory is reported held until the process has really ended.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { fixture } from '../../../test/fixtures/corpus.ts';
import { manyScanScript, writeProgressiveJpeg } from '../../../test/support/hostile-images.ts';
import { resolveJpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import { probeHeader } from '../image/probe.ts';
import { sniffFormat } from '../image/sniff.ts';
import type { ProbedImage } from '../image/types.ts';
import { DEFAULT_DIMENSION_LIMITS } from '../image/types.ts';
import { DecoderPool, decodeCpuLimitMs, processCpuMs } from './decoder-pool.ts';
import { decodeForModel } from './image-scorer.ts';

const jpegDecoder = resolveJpegDecoder('auto');
const maxTiles = SETTINGS.MAX_TILES.default;
const options = {
  inputSize: 224,
  limits: DEFAULT_DIMENSION_LIMITS,
  jpegDecoder,
  maxTiles,
  deadlineMs: 120_000,
  cpuLimitMs: 120_000,
};

async function load(name: string) {
  const bytes = readFileSync(fixture(name));
  return { name, bytes, probed: probeHeader(bytes, await sniffFormat(bytes)) };
}

const alive = (pid: number) => processCpuMs(pid) !== undefined;

describe('DecoderPool', () => {
  const names = ['320x240.jpg', 'Flag_of_the_Netherlands-alpha.png', 'animated-loop-3.webp', 'G31D.TIF'];
  let inputs: Awaited<ReturnType<typeof load>>[];
  let expected: Float32Array[];
  beforeAll(async () => {
    inputs = await Promise.all(names.map(load));
    expected = await Promise.all(
      inputs.map((i) =>
        decodeForModel(new Uint8Array(i.bytes), i.probed, 224, { jpegDecoder, maxTiles }).then(
          (d) => d.tensor,
        ),
      ),
    );
  });

  it('decodes to the same model inputs as the calling thread, several images at once', async () => {
    const pool = await DecoderPool.create({ ...options, processes: 2 });
    try {
      const uploads = inputs.map((i) => new Uint8Array(i.bytes));
      const decoded = await Promise.all(
        inputs.map((i, k) => pool.decode(uploads[k] as Uint8Array, i.probed, false)),
      );
      decoded.forEach((d, k) => {
        expect(d.tensor).toEqual(expected[k]);
        expect(d.decodeMs).toBeGreaterThan(0);
      });
      // Each upload was freed once its decoder had its copy: the pool owns what it is handed.
      expect(uploads.map((u) => u.byteLength)).toEqual(inputs.map(() => 0));
      const cut = readFileSync(fixture('320x240.jpg'));
      const bytes = cut.subarray(0, Math.floor(cut.length * 0.6));
      const err = await pool.decode(new Uint8Array(bytes), probeHeader(bytes, 'jpeg'), false).catch((e) => e);
      expect(err).toMatchObject({ status: 400, code: 4005 });
    } finally {
      await pool.close();
    }
  });

  describe('kills under load', () => {
    // ~1.6 s of CPU to decode (hundreds of scans over 122,500 blocks; 2000² took ~0.8 s), ~100 KB on the
    // wire: far past the limit below on any CPU.
    const side = 2800;
    const hostile = writeProgressiveJpeg({
      width: side,
      height: side,
      components: 1,
      scans: manyScanScript(1),
    });
    // The header probe refuses such a file (image-cost.ts); the pool below it must hold even so.
    const hostileProbed: ProbedImage = { format: 'jpeg', width: side, height: side, frames: 1 };
    let pool: DecoderPool;
    const replaced: Error[] = [];
    afterAll(() => pool?.close());

    it('kills each costly decode at its CPU limit with 4005, decodes every image beside it exactly, round after round', async () => {
      pool = await DecoderPool.create({
        ...options,
        processes: 3,
        // Room for an ordinary image's first decode in a fresh decoder (libvips loading its codecs),
        // which a loaded host took past 200 ms.
        cpuLimitMs: 400,
        onProcessError: (err) => replaced.push(err),
      });
      const rounds = 6;
      for (let round = 0; round < rounds; round++) {
        const released: Promise<void>[] = [];
        const killed = pool
          .decode(new Uint8Array(hostile), hostileProbed, false, (p) => released.push(p))
          .then(
            () => 'decoded',
            (err: unknown) => err,
          );
        const legit = inputs.map((i) => pool.decode(new Uint8Array(i.bytes), i.probed, false));
        const before = pool.pids;
        const err = await killed;
        expect(err).toMatchObject({ status: 400, code: 4005 });
        expect((err as Error).message).toMatch(/CPU time/);
        // The killed process's memory stays counted until it has exited, and then it is gone.
        expect(released).toHaveLength(1);
        await released[0];
        const gone = before.filter((pid) => !pool.pids.includes(pid));
        expect(gone).toHaveLength(1);
        expect(alive(gone[0] as number)).toBe(false);
        const decoded = await Promise.all(legit);
        for (const [k, d] of decoded.entries()) expect(d.tensor).toEqual(expected[k]);
      }
      expect(replaced).toHaveLength(rounds);
      // Never more decoders than the bound, killed ones still exiting included.
      expect(pool.pids.length).toBeLessThanOrEqual(3);
    }, 240_000);
  });

  it('starts a decoder only when an image needs one, and ends it when idle, listed until it has exited', async () => {
    const pool = await DecoderPool.create({ ...options, processes: 2, idleMs: 300 });
    try {
      // The decoder started to show that decoders start has ended.
      expect(pool.pids).toEqual([]);
      const [first] = inputs as [(typeof inputs)[0]];
      const decoding = pool.decode(new Uint8Array(first.bytes), first.probed, false);
      const [pid] = pool.pids as [number];
      expect(pool.pids).toHaveLength(1);
      expect((await decoding).tensor).toEqual(expected[0]);
      expect(alive(pid)).toBe(true);
      // Idle past idleMs: ended, and out of the list only once its process is gone.
      await expect.poll(() => pool.pids, { timeout: 10_000 }).toEqual([]);
      expect(alive(pid)).toBe(false);
      // The next image starts a fresh one.
      expect((await pool.decode(new Uint8Array(first.bytes), first.probed, false)).tensor).toEqual(
        expected[0],
      );
      expect(pool.pids).toHaveLength(1);
      expect(pool.pids[0]).not.toBe(pid);
    } finally {
      await pool.close();
    }
    expect(pool.pids).toEqual([]);
  }, 60_000);

  describe('supervision (stand-in decoders)', () => {
    const entry = new URL('../../../test/support/stand-in-decoder-process.mjs', import.meta.url);
    const image = (width: number) => ({ format: 'png' as const, width, height: 10, frames: 1 });

    it('answers 4005 (charged) for an image still decoding at the wall deadline, even without having used its CPU', async () => {
      const pool = await DecoderPool.create({
        ...options,
        processes: 1,
        entry,
        deadlineMs: 300,
        cpuLimitMs: 60_000,
      });
      try {
        const released: Promise<void>[] = [];
        const err = await pool
          .decode(new Uint8Array(4), image(22), false, (p) => released.push(p))
          .catch((e) => e);
        expect(err).toMatchObject({
          status: 400,
          code: 4005,
          message: 'Undecodable image: decoding it did not finish within 0.3 s',
        });
        expect(released).toHaveLength(1);
        await released[0];
        // The replacement takes the next image.
        expect((await pool.decode(new Uint8Array(4), image(10), false)).tensor).toHaveLength(4);
      } finally {
        await pool.close();
      }
    });

    it('answers 503 for the image whose decoder died, and keeps decoding', async () => {
      const replaced: Error[] = [];
      const pool = await DecoderPool.create({
        ...options,
        processes: 1,
        entry,
        onProcessError: (err) => replaced.push(err),
      });
      try {
        const err = await pool.decode(new Uint8Array(4), image(13), false).catch((e) => e);
        expect(err).toMatchObject({ status: 503, code: 5001 });
        expect(replaced[0]?.message).toMatch(/code 70/);
        expect((await pool.decode(new Uint8Array(4), image(10), false)).tensor).toHaveLength(4);
      } finally {
        await pool.close();
      }
    });

    /**
     * Two decoders: `first` never finishes and holds one; `second`, of the same kind, waits although the
     * other decoder is free (it is still waiting when the pool closes), and a small image gets that one.
     */
    async function expectOneKeptFree(
      first: [ProbedImage, boolean],
      second: [ProbedImage, boolean],
    ): Promise<void> {
      const pool = await DecoderPool.create({ ...options, processes: 2, entry, deadlineMs: 60_000 });
      try {
        void pool.decode(new Uint8Array(4), ...first).catch(() => {});
        const waiting = pool.decode(new Uint8Array(4), ...second).then(
          () => 'decoded',
          (err: unknown) => err,
        );
        const small = await pool.decode(new Uint8Array(4), image(10), false);
        expect(small.tensor).toHaveLength(4);
        await pool.close();
        expect(await waiting).toMatchObject({ code: 5001, message: 'Scorer is shut down' });
      } finally {
        await pool.close();
      }
    }

    it('keeps one decoder free of images allowed over 1 s of CPU (not large) for the others', async () => {
      // 22 × 400,000: 8.8 MP, 26 MB with its RGB (not large), allowed 1.13 s of CPU: heavy.
      const heavy = { format: 'png' as const, width: 22, height: 400_000, frames: 1 };
      // 10 × 1,000,000: 10 MP, 30 MB (not large), allowed 1.25 s: heavy too (the stand-in would answer it).
      await expectOneKeptFree([heavy, false], [{ ...heavy, width: 10, height: 1_000_000 }, false]);
    });

    it('keeps one decoder free of large images for the others', async () => {
      await expectOneKeptFree([image(22), true], [image(10), true]);
    });
  });
});

describe('decodeCpuLimitMs', () => {
  const probed = (width: number, height: number) => ({ format: 'jpeg' as const, width, height, frames: 1 });
  it('holds an image to what an ordinary one of its size costs, under the cap', () => {
    // 250 ms + 100 ns × 307,200 px + 10 ns × 50,000 B = 281.22 → 282
    expect(decodeCpuLimitMs(50_000, probed(640, 480), 6_000)).toBe(282);
    // A 3300² image: 250 + 1,089 + 0.8 → 1,340 ms, where the 2,647-scan one takes ~8 s.
    expect(decodeCpuLimitMs(79_680, probed(3300, 3300), 6_000)).toBe(1_340);
    // 196 MP: the cap.
    expect(decodeCpuLimitMs(1_000_000, probed(14_000, 14_000), 6_000)).toBe(6_000);
  });
});
