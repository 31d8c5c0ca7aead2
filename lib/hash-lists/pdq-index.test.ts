// The multi-index against a linear scan: the same hashes found within every distance the index serves,
// on random lists with planted neighbours at every distance from 0 to 48, in both of its layouts.

import { describe, expect, it } from 'vitest';
import { prng } from '../../test/support/prng.ts';
import { ListFileError, parseHashList } from './list-file.ts';
import { PDQ_BYTES, PDQ_WORDS, pdqDistance, pdqHex, popcount32, wordsOf } from './pdq-hex.ts';
import { type ChunkCount, chunkRadius, MAX_INDEX_DISTANCE, PdqIndex } from './pdq-index.ts';

function randomHashes(n: number, random: () => number): Uint8Array {
  const out = new Uint8Array(n * PDQ_BYTES);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor(random() * 256);
  return out;
}

/** A copy of hash `at` with `bits` distinct bits flipped. */
function flipped(hashes: Uint8Array, at: number, bits: number, random: () => number): Uint8Array {
  const copy = hashes.slice(at * PDQ_BYTES, (at + 1) * PDQ_BYTES);
  const chosen = new Set<number>();
  while (chosen.size < bits) chosen.add(Math.floor(random() * 256));
  for (const b of chosen) copy[b >> 3] = (copy[b >> 3] as number) ^ (1 << (b & 7));
  return copy;
}

function linear(
  hashes: Uint8Array,
  query: Uint32Array,
  maxDistance: number,
): { id: number; distance: number }[] {
  const n = hashes.length / PDQ_BYTES;
  const words = new Uint32Array(PDQ_WORDS);
  const found = [];
  for (let id = 0; id < n; id++) {
    wordsOf(hashes, id * PDQ_BYTES, words);
    let d = 0;
    for (let w = 0; w < PDQ_WORDS; w++) d += popcount32(((words[w] as number) ^ (query[w] as number)) >>> 0);
    if (d <= maxDistance) found.push({ id, distance: d });
  }
  return found;
}

describe.each([16, 12] as ChunkCount[])('PdqIndex of %i chunks', (chunks) => {
  const random = prng(44);
  const n = 20_000;
  const hashes = randomHashes(n, random);
  // Planted: 49 hashes at distances 0..48 from hash 7 (appended), so every radius has answers.
  const planted = Array.from({ length: 49 }, (_, d) => flipped(hashes, 7, d, random));
  const all = new Uint8Array((n + planted.length) * PDQ_BYTES);
  all.set(hashes);
  planted.forEach((p, i) => {
    all.set(p, (n + i) * PDQ_BYTES);
  });
  const index = new PdqIndex(all, chunks);

  it('is built with the chunks asked for', () => {
    expect(index.chunks).toBe(chunks);
  });

  it('finds exactly what a linear scan finds, at every distance it serves', () => {
    const query = wordsOf(all, 7 * PDQ_BYTES);
    for (const d of [0, 1, 15, 16, 17, 31, 32, 47]) {
      const expected = linear(all, query, d);
      expect(index.within(query, d), `distance ${d}`).toEqual(expected);
      // Hash 7 itself and the planted ones up to d.
      expect(expected.length, `distance ${d}`).toBeGreaterThanOrEqual(d + 2);
    }
    for (let q = 0; q < 50; q++) {
      const probe = wordsOf(flipped(all, Math.floor(random() * n), Math.floor(random() * 40), random), 0);
      expect(index.within(probe, 31)).toEqual(linear(all, probe, 31));
    }
  });

  it('answers the nearest entry within the distance, or none', () => {
    const query = wordsOf(flipped(all, 7, 3, random), 0);
    const nearest = index.nearest(query, 31);
    expect(nearest?.distance).toBeLessThanOrEqual(3);
    expect(index.nearest(wordsOf(randomHashes(1, random), 0), 31)).toBeUndefined();
  });

  it('finds hashes whose differing bits are spread over the chunks to slip past the probes', () => {
    // Chunk c spans `width` bits from `start` (the widest first, as the index cuts them). Each planted
    // hash differs from hash 7 in d bits dealt out to the chunks, one at a time from the last chunk
    // (radius q − 1) or the first (radius q), so that as many chunks as the distance allows are each
    // farther than their radius: only the generalised pigeonhole's bound leaves one of them in reach.
    const base = Math.floor(256 / chunks);
    const starts = Array.from({ length: chunks }, (_, c) => c * base + Math.min(c, 256 % chunks));
    const query = all.subarray(7 * PDQ_BYTES, 8 * PDQ_BYTES);
    for (let d = 0; d <= MAX_INDEX_DISTANCE; d++) {
      for (const order of ['from the last chunk', 'from the first chunk']) {
        const hash = Uint8Array.from(query);
        const used = new Array<number>(chunks).fill(0);
        for (let bit = 0; bit < d; bit++) {
          const turn = bit % chunks;
          const c = order === 'from the last chunk' ? chunks - 1 - turn : turn;
          const at = (starts[c] as number) + (used[c] as number);
          used[c] = (used[c] as number) + 1;
          hash[at >> 3] = (hash[at >> 3] as number) ^ (0x80 >> (at & 7));
        }
        const probe = wordsOf(hash, 0);
        expect(index.within(probe, d), `distance ${d}, bits dealt ${order}`).toContainEqual({
          id: 7,
          distance: d,
        });
      }
    }
  });

  it('probes each chunk at a radius whose sum covers the distance, never wider than ⌊d / m⌋', () => {
    for (let d = 0; d <= MAX_INDEX_DISTANCE; d++) {
      const radii = Array.from({ length: chunks }, (_, c) => chunkRadius(c, chunks, d));
      expect(
        radii.reduce((sum, r) => sum + r + 1, 0),
        `distance ${d}`,
      ).toBeGreaterThan(d);
      for (const r of radii) expect(r).toBeLessThanOrEqual(Math.floor(d / chunks));
    }
  });

  it('refuses a distance its probes do not cover', () => {
    expect(() => index.within(new Uint32Array(8), MAX_INDEX_DISTANCE + 1)).toThrow(RangeError);
  });
});

describe('hash list files', () => {
  const a = 'f'.repeat(64);
  const b = `${'0'.repeat(63)}1`;

  it('reads one hash a line, with comments and blank lines, and CSV exports', () => {
    const plain = parseHashList(`# a list\n${a}\n\n  ${b.toUpperCase()}  \n`);
    expect(plain.length / PDQ_BYTES).toBe(2);
    expect(pdqHex(plain, PDQ_BYTES)).toBe(b);
    const csv = parseHashList(`signal_type,signal,note\npdq,${a},x\nmd5,0123,y\n"pdq","${b}",z\n`);
    expect([pdqHex(csv, 0), pdqHex(csv, PDQ_BYTES)]).toEqual([a, b]);
  });

  it('fails the whole file on its first malformed line, naming it and not echoing it', () => {
    const secret = 'not-a-hash-but-maybe-confidential';
    const err = (() => {
      try {
        parseHashList(`${a}\n# ok\n${secret}\n${b}\n`);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ListFileError);
    expect((err as ListFileError).line).toBe(3);
    expect((err as Error).message).not.toContain(secret);
    expect(() => parseHashList(`hash,note\n${a.slice(1)},x\n`)).toThrow(/line 2/);
  });

  it('measures the distance as threatexchange does', () => {
    expect(pdqDistance(a, b)).toBe(255);
    expect(pdqDistance(a, a)).toBe(0);
  });
});
