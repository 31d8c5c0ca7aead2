// GET /internal/hash-lists on detect: the lists a replica matches against now — names, counts and
// digests, never a hash. The operator asks every ready detect replica (services/operator/
// hash-list-readers.ts) and reports a HashList in force on those that hold its published digest.

import type { HashListAction } from './hash-list-store.ts';

export const HASH_LIST_REPORT_PATH = '/internal/hash-lists';

/** One list as a replica holds it. */
export interface HeldList {
  name: string;
  action: HashListAction;
  maxDistance: number;
  hashes: number;
  /** SHA-256 of the hashes (hash-list-redis.ts hashesDigest). */
  digest: string;
}

/** The body's `data`. */
export interface HashListReport {
  /** The generation of the source the lists were loaded at (0: none loaded). */
  generation: number;
  lists: HeldList[];
}
