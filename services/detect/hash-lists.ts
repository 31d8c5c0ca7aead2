// Known-bad images, matched: the operator's PDQ hash lists (lib/hash-lists/) against each scored image's
// PDQ and its seven rotations and mirrors. The lists in force are one immutable value — every list's
// index built — swapped whole once a reload has finished, so a request sees the lists as they were before
// a change or after it, never half of one. HASH_LISTS_FILE is polled every HASH_LISTS_RELOAD_SECONDS:
// an import or a removal (`npm run admin -- hash-list …`) is in force within that, without a restart.
// Hashes never reach a log, a span or a metric: only a matched list's name and distance leave.

import type { FastifyBaseLogger } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import { type Env, intSetting, pathSetting } from '../../lib/common/config.ts';
import { type HashList, type HashListAction, HashListStore } from '../../lib/hash-lists/hash-list-store.ts';
import { pdqWords } from '../../lib/hash-lists/pdq-hex.ts';
import { PdqIndex } from '../../lib/hash-lists/pdq-index.ts';
import type { ImagePdq } from './image/pdq.ts';

export interface HashListConfig {
  /** HASH_LISTS_FILE: the embedded lists (absent: none). */
  file: string;
  reloadMs: number;
  /** PDQ_MIN_QUALITY: images of lower PDQ quality are not matched. */
  minQuality: number;
  /** PDQ_HASHES: each image hashed and matched (off: neither, no lists loaded). */
  enabled: boolean;
}

export function loadHashListConfig(env: Env): HashListConfig {
  return {
    file: pathSetting(env, 'HASH_LISTS_FILE'),
    reloadMs: intSetting(env, 'HASH_LISTS_RELOAD_SECONDS') * 1000,
    minQuality: intSetting(env, 'PDQ_MIN_QUALITY'),
    enabled: env.PDQ_HASHES === 'on',
  };
}

/** One list's closest hit: what the answer's `matches` holds. */
export interface HashListMatch {
  list: string;
  distance: number;
  action: HashListAction;
}

interface IndexedList {
  name: string;
  action: HashListAction;
  maxDistance: number;
  index: PdqIndex;
}

/** The lists in force: immutable, replaced whole. */
export class HashListSet {
  static readonly EMPTY = new HashListSet([], 0);
  readonly lists: readonly IndexedList[];
  /** Where they came from (the store's generation). */
  readonly generation: number;

  constructor(lists: readonly IndexedList[], generation: number) {
    this.lists = lists;
    this.generation = generation;
  }

  static build(lists: readonly HashList[], generation: number): HashListSet {
    return new HashListSet(
      lists.map((l) => ({
        name: l.name,
        action: l.action,
        maxDistance: l.maxDistance,
        index: new PdqIndex(l.hashes),
      })),
      generation,
    );
  }

  get hashes(): number {
    return this.lists.reduce((n, l) => n + l.index.size, 0);
  }

  /** Each list's closest entry within its distance of any of the hashes (an image's dihedral variants). */
  match(hashes: readonly string[]): HashListMatch[] {
    if (this.lists.length === 0) return [];
    const queries = hashes.map(pdqWords);
    const matches: HashListMatch[] = [];
    for (const list of this.lists) {
      let best: number | undefined;
      for (const q of queries) {
        const hit = list.index.nearest(q, best === undefined ? list.maxDistance : best - 1);
        if (hit) best = hit.distance;
        if (best === 0) break;
      }
      if (best !== undefined) matches.push({ list: list.name, distance: best, action: list.action });
    }
    return matches;
  }
}

/** The matching step of a detect request: the lists in force, with their quality floor and metrics. */
export interface HashMatcher {
  /** Matches of the image (empty below the quality floor or without a hash). */
  match(pdq: ImagePdq | undefined): HashListMatch[];
}

/** Counts matches per list (never the hash). */
export function createHashListMetrics(registry: Registry): Counter<'list' | 'action'> {
  return new Counter({
    name: 'nsfwdetector_hash_list_matches_total',
    help: 'Images that matched a known-bad hash list, by list and its action.',
    labelNames: ['list', 'action'],
    registers: [registry],
  });
}

/**
 * Keeps HASH_LISTS_FILE's lists in force: loads them at start, then polls the store's generation and
 * swaps in a new set once a changed one has loaded. A load that fails keeps the lists in force (logged).
 */
export class HashListWatcher implements HashMatcher {
  #current = HashListSet.EMPTY;
  readonly #config: HashListConfig;
  readonly #log: Pick<FastifyBaseLogger, 'info' | 'error'>;
  readonly #counter: Counter<'list' | 'action'> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #store: HashListStore | undefined;

  constructor(
    config: HashListConfig,
    log: Pick<FastifyBaseLogger, 'info' | 'error'>,
    counter?: Counter<'list' | 'action'>,
  ) {
    this.#config = config;
    this.#log = log;
    this.#counter = counter;
  }

  get current(): HashListSet {
    return this.#current;
  }

  start(): void {
    this.reload();
    this.#timer = setInterval(() => this.reload(), this.#config.reloadMs);
    this.#timer.unref();
  }

  /** Loads the lists when their generation moved (or the file appeared). */
  reload(): void {
    try {
      if (!this.#store) {
        try {
          this.#store = new HashListStore(this.#config.file, { readOnly: true });
        } catch {
          return; // no lists file yet: no lists
        }
      }
      const generation = this.#store.generation();
      if (generation === this.#current.generation) return;
      const started = performance.now();
      const { generation: loaded, lists } = this.#store.loadAll();
      const next = HashListSet.build(lists, loaded);
      this.#current = next;
      this.#log.info(
        {
          lists: lists.map((l) => ({ name: l.name, hashes: l.count })),
          ms: Math.round(performance.now() - started),
        },
        'hash lists in force',
      );
    } catch (err) {
      this.#log.error({ err }, 'hash lists could not be loaded; the lists in force stay');
    }
  }

  match(pdq: ImagePdq | undefined): HashListMatch[] {
    if (!pdq || pdq.quality < this.#config.minQuality) return [];
    const matches = this.#current.match(pdq.variants);
    for (const m of matches) this.#counter?.inc({ list: m.list, action: m.action });
    return matches;
  }

  close(): void {
    clearInterval(this.#timer);
    this.#store?.close();
    this.#store = undefined;
  }
}
