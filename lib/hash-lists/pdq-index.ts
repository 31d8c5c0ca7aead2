// Every listed hash within a distance of a query, among millions, in well under a millisecond: multi-index
// hashing (Norouzi et al.; Meta's own pdq/cpp/index/mih.h) over the m chunks of a hash. Two hashes within
// distance d differ in at most ⌊d / m⌋ bits in at least one chunk (pigeonhole), so a query looks up, in
// each chunk's table, its own chunk value and every value up to that many bits away, and verifies the
// hashes found there in full.
//
// The chunk count follows the list's size. Up to 4 M hashes: sixteen 16-bit chunks, radius 1 at d = 31
// (272 buckets of n / 65,536 hashes). Past it a bucket holds so many candidates that each query verifies
// tens of thousands (41,500 at 10 M), so twelve chunks of 21–22 bits, eight probed at radius 2 and four
// at radius 1 (chunkRadius: 2,032 buckets, ~7,300 candidates at 10 M): a sixth of the candidates for
// 128 MiB of offsets, which at 4 M hashes and more is at most 32 bytes a hash — what the four fewer
// tables of ids save.
//
// Layout, immutable once built: the hashes (32 bytes each, as eight 32-bit words) and per chunk a
// counting-sort of ids by chunk value (offsets 2^width + 1 of 4 bytes, ids of 3 bytes while a list holds
// at most 2^24 hashes, else 4), built in two passes over the hashes without sorting. Every table gives
// every hash a place, so no layout of this kind goes below 32 + m × 2 bytes a hash (an id among n in
// 2^16–2^22 buckets carries 16 bits or more however it is coded): 80 at 16 chunks, 68 + offsets at 12.
//
// The candidates are verified in blocks: first one read of each (independent reads the memory system
// overlaps: ~14 ns each at 10 M here, where the read inside the popcount arithmetic took ~120), then the
// arithmetic on lines already in cache.

import { PDQ_BYTES, PDQ_WORDS, popcount32, wordsOf } from './pdq-hex.ts';

/** The farthest a list may match; the probes' radius is at most ⌊47 / 12⌋ = 3 bits a chunk. */
export const MAX_INDEX_DISTANCE = 47;
/** From this many hashes on, twelve wider chunks (above). */
export const WIDE_CHUNKS_FROM = 1 << 22;
/** Candidates read ahead at once: their lines (64 bytes each) stay in L2 until verified. */
const BLOCK = 2_048;

export type ChunkCount = 16 | 12;

/** One chunk of a hash: `width` bits from bit `start` (0 = the high bit of the first hex digit). */
interface Chunk {
  start: number;
  width: number;
}

function chunksOf(count: ChunkCount): Chunk[] {
  const base = Math.floor((PDQ_WORDS * 32) / count);
  const wider = (PDQ_WORDS * 32) % count;
  const chunks: Chunk[] = [];
  for (let c = 0, start = 0; c < count; c++) {
    const width = base + (c < wider ? 1 : 0);
    chunks.push({ start, width });
    start += width;
  }
  return chunks;
}

/** The value of `chunk` in the hash whose words start at `w` (a chunk spans at most two words). */
function chunkValue(words: Uint32Array, w: number, { start, width }: Chunk): number {
  const word = w + (start >>> 5);
  const offset = start & 31;
  const first = words[word] as number;
  if (offset + width <= 32) return (first >>> (32 - offset - width)) & ((1 << width) - 1);
  const high = 32 - offset;
  const low = width - high;
  return ((first & ((1 << high) - 1)) << low) | ((words[word + 1] as number) >>> (32 - low));
}

/** Every value within `radius` bits of 0 in a chunk of `width` bits: the masks a chunk is probed with. */
const probeCache = new Map<string, Uint32Array>();
function probes(width: number, radius: number): Uint32Array {
  const key = `${width}/${radius}`;
  let masks = probeCache.get(key);
  if (!masks) {
    const out = [0];
    const add = (from: number, mask: number, left: number) => {
      for (let b = from; b < width; b++) {
        out.push(mask | (1 << b));
        if (left > 1) add(b + 1, mask | (1 << b), left - 1);
      }
    };
    if (radius > 0) add(0, 0, radius);
    masks = Uint32Array.from(out);
    probeCache.set(key, masks);
  }
  return masks;
}

/**
 * The radius chunk `c` of `m` is probed at for a search within `d` (-1: not probed). The generalised
 * pigeonhole (Qin et al., "GPH"): if chunk i is probed at r_i and Σ (r_i + 1) > d, a hash within d is
 * within r_i of the query in some chunk i (else its distance would be at least Σ (r_i + 1)). With
 * q = ⌊(d + 1) / m⌋, the first (d + 1) mod m chunks (the widest: chunksOf puts them first, and a wider
 * chunk's buckets are emptier) get q, the others q − 1: at d = 31 and twelve chunks, eight at radius 2
 * and four at 1 (Σ = 32) instead of all twelve at 2, a third fewer probes and candidates; at sixteen
 * chunks, all at 1 as before.
 */
export function chunkRadius(c: number, m: number, d: number): number {
  const q = Math.floor((d + 1) / m);
  return c < (d + 1) % m ? q : q - 1;
}

export interface IndexMatch {
  /** Position of the hash in the list. */
  id: number;
  distance: number;
}

export class PdqIndex {
  readonly size: number;
  readonly #words: Uint32Array;
  readonly #chunks: Chunk[];
  readonly #offsets: Uint32Array[];
  /** Per chunk, the ids by chunk value: 3 bytes each (little-endian) while n ≤ 2^24, else 4. */
  readonly #ids: Uint8Array[];
  readonly #idBytes: 3 | 4;
  /** The candidates of the query being answered (queries run one at a time on a thread). */
  #candidates = new Uint32Array(1 << 16);
  /** The bounds (in bytes of #ids) of the buckets a chunk probes. */
  #starts = new Uint32Array(0);
  #ends = new Uint32Array(0);
  /** Where the read-aheads' values go, so that the compiler keeps the reads. */
  #readAhead = 0;

  /** `hashes`: 32 bytes a hash (list-file.ts). `chunks`: chosen by size unless given (tests). */
  constructor(hashes: Uint8Array, chunks?: ChunkCount) {
    const n = Math.floor(hashes.length / PDQ_BYTES);
    this.size = n;
    const words = new Uint32Array(n * PDQ_WORDS);
    for (let i = 0; i < n; i++) wordsOf(hashes, i * PDQ_BYTES, words, i * PDQ_WORDS);
    this.#words = words;
    this.#chunks = chunksOf(chunks ?? (n >= WIDE_CHUNKS_FROM ? 12 : 16));
    this.#offsets = [];
    this.#ids = [];
    const idBytes = n <= 1 << 24 ? 3 : 4;
    this.#idBytes = idBytes;
    for (const chunk of this.#chunks) {
      const buckets = 1 << chunk.width;
      const offsets = new Uint32Array(buckets + 1);
      for (let i = 0; i < n; i++) {
        const b = chunkValue(words, i * PDQ_WORDS, chunk) + 1;
        offsets[b] = (offsets[b] as number) + 1;
      }
      for (let b = 0; b < buckets; b++) offsets[b + 1] = (offsets[b + 1] as number) + (offsets[b] as number);
      const next = offsets.slice(0, buckets);
      const ids = new Uint8Array(n * idBytes);
      for (let i = 0; i < n; i++) {
        const b = chunkValue(words, i * PDQ_WORDS, chunk);
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

  /** How many chunks the hashes are indexed by. */
  get chunks(): number {
    return this.#chunks.length;
  }

  /** Bytes the index holds. */
  get bytes(): number {
    let bytes = this.#words.byteLength;
    for (let c = 0; c < this.#chunks.length; c++)
      bytes += (this.#offsets[c] as Uint32Array).byteLength + (this.#ids[c] as Uint8Array).byteLength;
    return bytes;
  }

  /** The closest listed hash within `maxDistance` of `query` (eight 32-bit words), or undefined. */
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
    const count = this.#gather(query, maxDistance);
    const candidates = this.#candidates;
    const words = this.#words;
    const q0 = query[0] as number;
    const q1 = query[1] as number;
    const q2 = query[2] as number;
    const q3 = query[3] as number;
    const q4 = query[4] as number;
    const q5 = query[5] as number;
    const q6 = query[6] as number;
    const q7 = query[7] as number;
    // A hash close in several chunks is verified (and reported) once per chunk: cheaper than
    // remembering which were seen.
    for (let from = 0; from < count; from += BLOCK) {
      const to = Math.min(count, from + BLOCK);
      let touched = 0;
      for (let i = from; i < to; i++) touched ^= words[(candidates[i] as number) * PDQ_WORDS] as number;
      this.#readAhead ^= touched;
      // Half a hash is 128 bits: a random one is almost never within 47 of it, so this branch is
      // predicted right and the other half is read only for real neighbours.
      for (let i = from; i < to; i++) {
        const id = candidates[i] as number;
        const w = id * PDQ_WORDS;
        let d =
          popcount32(q0 ^ (words[w] as number)) +
          popcount32(q1 ^ (words[w + 1] as number)) +
          popcount32(q2 ^ (words[w + 2] as number)) +
          popcount32(q3 ^ (words[w + 3] as number));
        if (d > maxDistance) continue;
        d +=
          popcount32(q4 ^ (words[w + 4] as number)) +
          popcount32(q5 ^ (words[w + 5] as number)) +
          popcount32(q6 ^ (words[w + 6] as number)) +
          popcount32(q7 ^ (words[w + 7] as number));
        if (d <= maxDistance) report(id, d);
      }
    }
  }

  /** Puts the ids in every bucket the query's chunks probe within `maxDistance` into #candidates; their count. */
  #gather(query: Uint32Array, maxDistance: number): number {
    const idBytes = this.#idBytes;
    let candidates = this.#candidates;
    let count = 0;
    for (let c = 0; c < this.#chunks.length; c++) {
      const radius = chunkRadius(c, this.#chunks.length, maxDistance);
      if (radius < 0) continue;
      const chunk = this.#chunks[c] as Chunk;
      const offsets = this.#offsets[c] as Uint32Array;
      const ids = this.#ids[c] as Uint8Array;
      const own = chunkValue(query, 0, chunk);
      const masks = probes(chunk.width, radius);
      const probed = masks.length;
      if (this.#starts.length < probed) {
        this.#starts = new Uint32Array(probed);
        this.#ends = new Uint32Array(probed);
      }
      const starts = this.#starts;
      const ends = this.#ends;
      // The buckets' bounds first, then a read of each bucket's first id, then the copies: each pass
      // reads independent places, which the memory system fetches together.
      let size = 0;
      for (let m = 0; m < probed; m++) {
        const value = own ^ (masks[m] as number);
        const start = offsets[value] as number;
        const end = offsets[value + 1] as number;
        starts[m] = start * idBytes;
        ends[m] = end * idBytes;
        size += end - start;
      }
      let touched = 0;
      for (let m = 0; m < probed; m++) touched ^= ids[starts[m] as number] as number;
      this.#readAhead ^= touched;
      if (count + size > candidates.length) {
        const grown = new Uint32Array(Math.max(2 * candidates.length, count + size));
        grown.set(candidates.subarray(0, count));
        candidates = grown;
        this.#candidates = grown;
      }
      for (let m = 0; m < probed; m++)
        for (let k = starts[m] as number, stop = ends[m] as number; k < stop; k += idBytes)
          candidates[count++] =
            ((ids[k] as number) |
              ((ids[k + 1] as number) << 8) |
              ((ids[k + 2] as number) << 16) |
              (idBytes === 4 ? (ids[k + 3] as number) << 24 : 0)) >>>
            0;
    }
    return count;
  }
}
