// Every listed hash within a distance of a query, among millions, in well under a millisecond: multi-index
// hashing (Norouzi et al.; Meta's own pdq/cpp/index/mih.h) over the sixteen 16-bit chunks of a hash. Two
// hashes within distance d ≤ 31 differ in at most ⌊d / 16⌋ = 1 bit in at least one chunk (pigeonhole), so
// a query looks up, in each chunk's table, its own chunk value and the 16 values one bit away: 272
// buckets, each holding the ids of the hashes with that chunk value, and verifies those candidates in
// full. Distances up to 47 probe 2 bits away (136 values more a chunk); the index refuses more.
//
// Layout, immutable once built: the hashes (32 bytes each, as eight 32-bit words) and per chunk a
// counting-sort of ids by chunk value (offsets 65,537 × 4 bytes, ids of 3 bytes while a list holds at
// most 2^24 hashes, else 4): 80 bytes a hash and 4 MiB, built in two passes over the hashes without
// sorting. Sixteen tables each give every hash a place, so no layout of this kind goes below 32 + 16 × 2
// = 64 bytes a hash (an id among n in 65,536 buckets carries ~16 bits however it is coded).

import { PDQ_BYTES, PDQ_WORDS, popcount32, wordsOf } from './pdq-hex.ts';

const CHUNKS = 16;
const BUCKETS = 1 << 16;
/** Largest distance the probes cover: ⌊47 / 16⌋ = 2 bits in some chunk. */
export const MAX_INDEX_DISTANCE = 47;

/** The 16-bit chunk c (0 = the first four hex digits) of the hash whose words start at `w`. */
const chunkOf = (words: Uint32Array, w: number, c: number): number =>
  ((words[w + (c >> 1)] as number) >>> (c & 1 ? 0 : 16)) & 0xffff;

/** The masks a chunk's value is probed with, per radius: itself, then every value 1 (and 2) bits away. */
const PROBES: Uint32Array[] = (() => {
  const one = Array.from({ length: 16 }, (_, b) => 1 << b);
  const two = one.flatMap((x, i) => one.slice(i + 1).map((y) => x | y));
  return [Uint32Array.of(0), Uint32Array.from([0, ...one]), Uint32Array.from([0, ...one, ...two])];
})();

export interface IndexMatch {
  /** Position of the hash in the list. */
  id: number;
  distance: number;
}

export class PdqIndex {
  readonly size: number;
  readonly #words: Uint32Array;
  readonly #offsets: Uint32Array[];
  /** Per chunk, the ids by chunk value: 3 bytes each (little-endian) while n ≤ 2^24, else 4. */
  readonly #ids: Uint8Array[];
  readonly #idBytes: 3 | 4;

  /** `hashes`: 32 bytes a hash (list-file.ts). */
  constructor(hashes: Uint8Array) {
    const n = Math.floor(hashes.length / PDQ_BYTES);
    this.size = n;
    const words = new Uint32Array(n * PDQ_WORDS);
    for (let i = 0; i < n; i++) wordsOf(hashes, i * PDQ_BYTES, words, i * PDQ_WORDS);
    this.#words = words;
    this.#offsets = [];
    this.#ids = [];
    const idBytes = n <= 1 << 24 ? 3 : 4;
    this.#idBytes = idBytes;
    for (let c = 0; c < CHUNKS; c++) {
      const offsets = new Uint32Array(BUCKETS + 1);
      for (let i = 0; i < n; i++) {
        const b = chunkOf(words, i * PDQ_WORDS, c) + 1;
        offsets[b] = (offsets[b] as number) + 1;
      }
      for (let b = 0; b < BUCKETS; b++) offsets[b + 1] = (offsets[b + 1] as number) + (offsets[b] as number);
      const next = offsets.slice(0, BUCKETS);
      const ids = new Uint8Array(n * idBytes);
      for (let i = 0; i < n; i++) {
        const b = chunkOf(words, i * PDQ_WORDS, c);
        const at = (next[b] as number) * idBytes;
        ids[at] = i & 0xff;
        ids[at + 1] = (i >>> 8) & 0xff;
        ids[at + 2] = (i >>> 16) & 0xff;
        if (idBytes === 4) ids[at + 3] = i >>> 24;
        next[b] = (next[b] as number) + 1;
      }
      this.#offsets.push(offsets);
      this.#ids.push(ids);
    }
  }

  /** Bytes the index holds. */
  get bytes(): number {
    return (
      this.#words.byteLength + this.#offsets.length * (BUCKETS + 1) * 4 + this.size * CHUNKS * this.#idBytes
    );
  }

  /**
   * The closest listed hash within `maxDistance` of `query` (eight 32-bit words), or undefined. Each
   * candidate is verified word by word, stopping as soon as it is out of reach.
   */
  nearest(query: Uint32Array, maxDistance: number): IndexMatch | undefined {
    let best: IndexMatch | undefined;
    this.#each(query, maxDistance, (id, distance) => {
      if (!best || distance < best.distance || (distance === best.distance && id < best.id))
        best = { id, distance };
    });
    return best;
  }

  /** Every listed hash within `maxDistance` of `query` (each once). */
  within(query: Uint32Array, maxDistance: number): IndexMatch[] {
    const found = new Map<number, number>();
    this.#each(query, maxDistance, (id, distance) => found.set(id, distance));
    return [...found].map(([id, distance]) => ({ id, distance })).sort((a, b) => a.id - b.id);
  }

  #each(query: Uint32Array, maxDistance: number, report: (id: number, distance: number) => void): void {
    if (!Number.isInteger(maxDistance) || maxDistance < 0 || maxDistance > MAX_INDEX_DISTANCE) {
      throw new RangeError(`distance ${maxDistance} outside 0..${MAX_INDEX_DISTANCE}`);
    }
    const radius = Math.floor(maxDistance / CHUNKS);
    const words = this.#words;
    const q0 = query[0] as number;
    const q1 = query[1] as number;
    const q2 = query[2] as number;
    const q3 = query[3] as number;
    const q4 = query[4] as number;
    const q5 = query[5] as number;
    const q6 = query[6] as number;
    const q7 = query[7] as number;
    const masks = PROBES[radius] as Uint32Array;
    const idBytes = this.#idBytes;
    for (let c = 0; c < CHUNKS; c++) {
      const offsets = this.#offsets[c] as Uint32Array;
      const ids = this.#ids[c] as Uint8Array;
      const own = chunkOf(query, 0, c);
      for (let m = 0; m < masks.length; m++) {
        const value = own ^ (masks[m] as number);
        const end = offsets[value + 1] as number;
        // A hash close in several chunks is verified (and reported) once per chunk: cheaper than
        // remembering which were seen.
        for (let k = offsets[value] as number; k < end; k++) {
          const at = k * idBytes;
          const id =
            ((ids[at] as number) |
              ((ids[at + 1] as number) << 8) |
              ((ids[at + 2] as number) << 16) |
              (idBytes === 4 ? (ids[at + 3] as number) << 24 : 0)) >>>
            0;
          const w = id * PDQ_WORDS;
          let d =
            popcount32((q0 ^ (words[w] as number)) >>> 0) + popcount32((q1 ^ (words[w + 1] as number)) >>> 0);
          if (d > maxDistance) continue;
          d +=
            popcount32((q2 ^ (words[w + 2] as number)) >>> 0) +
            popcount32((q3 ^ (words[w + 3] as number)) >>> 0);
          if (d > maxDistance) continue;
          d +=
            popcount32((q4 ^ (words[w + 4] as number)) >>> 0) +
            popcount32((q5 ^ (words[w + 5] as number)) >>> 0);
          if (d > maxDistance) continue;
          d +=
            popcount32((q6 ^ (words[w + 6] as number)) >>> 0) +
            popcount32((q7 ^ (words[w + 7] as number)) >>> 0);
          if (d <= maxDistance) report(id, d);
        }
      }
    }
  }
}
