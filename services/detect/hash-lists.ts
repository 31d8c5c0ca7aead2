// Known-bad images, matched: the operator's PDQ hash lists (lib/hash-lists/) against each scored image's
// PDQ and its seven rotations and mirrors. The lists in force are one immutable value — every list's
// index built — swapped whole once a reload has finished, so a request sees the lists as they were before
// a change or after it, never half of one. The source is polled every HASH_LISTS_RELOAD_SECONDS: the
// embedded HASH_LISTS_FILE (`npm run admin -- hash-list …`) or, in a cluster (HASH_LISTS_FROM=redis),
// the HashList resources the operator publishes to Redis (lib/hash-lists/hash-list-redis.ts); a change
// is in force within that, without a restart. GET /internal/hash-lists tells the operator which lists
// (names, counts, digests: never a hash) this process holds. Hashes never reach a log, a span or a
// metric: only a matched list's name and distance leave.

import { existsSync } from 'node:fs';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import { type Env, enumSetting, intSetting, pathSetting } from '../../lib/common/config.ts';
import { ok } from '../../lib/common/envelope.ts';
import { hashesDigest, type RedisHashLists } from '../../lib/hash-lists/hash-list-redis.ts';
import { HASH_LIST_REPORT_PATH, type HashListReport } from '../../lib/hash-lists/hash-list-report.ts';
import { type HashList, type HashListAction, HashListStore } from '../../lib/hash-lists/hash-list-store.ts';
import { pdqWords } from '../../lib/hash-lists/pdq-hex.ts';
import { PdqIndex } from '../../lib/hash-lists/pdq-index.ts';
import type { ImagePdq } from './image/pdq.ts';

export interface HashListConfig {
  /** HASH_LISTS_FROM: the embedded file, or the operator's lists in Redis. */
  from: 'file' | 'redis';
  /** HASH_LISTS_FILE: the embedded lists (absent: none). */
  file: string;
  reloadMs: number;
  /** PDQ_MIN_QUALITY: images of lower PDQ quality are not matched. */
  minQuality: number;
  /** PDQ_HASHES: lists loaded and matched (off: no list loaded, no image hashed). */
  enabled: boolean;
  /** PDQ_HASHES=on: every image hashed, lists or not (auto: only while a list is in force). */
  always: boolean;
}

export function loadHashListConfig(env: Env): HashListConfig {
  return {
    from: enumSetting(env, 'HASH_LISTS_FROM'),
    file: pathSetting(env, 'HASH_LISTS_FILE'),
    reloadMs: intSetting(env, 'HASH_LISTS_RELOAD_SECONDS') * 1000,
    minQuality: intSetting(env, 'PDQ_MIN_QUALITY'),
    enabled: enumSetting(env, 'PDQ_HASHES') !== 'off',
    always: enumSetting(env, 'PDQ_HASHES') === 'on',
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
  /** SHA-256 of the hashes (lib/hash-lists/hash-list-redis.ts): an unchanged list keeps its index. */
  digest: string;
  index: PdqIndex;
}

/** A list as a source loads it; `digest` when the source knows it already. */
export type LoadedList = HashList & { digest?: string };

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

  /** The set of `lists`; a list whose hashes `previous` already indexed keeps that index. */
  static build(lists: readonly LoadedList[], generation: number, previous?: HashListSet): HashListSet {
    return new HashListSet(
      lists.map((l) => {
        const digest = l.digest ?? hashesDigest(l.hashes);
        const index = previous?.lists.find((p) => p.digest === digest)?.index ?? new PdqIndex(l.hashes);
        return { name: l.name, action: l.action, maxDistance: l.maxDistance, digest, index };
      }),
      generation,
    );
  }

  /** An index already built for hashes of this digest (what a reload need not fetch again). */
  indexed(digest: string): PdqIndex | undefined {
    return this.lists.find((l) => l.digest === digest)?.index;
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
  /** Whether to hash the next image: PDQ_HASHES=on, or auto and a list is in force. */
  wantsHash(): boolean;
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

/** Where the lists come from: polled for a generation, loaded whole when it moved. */
export interface HashListSource {
  /** The generation of the lists now; undefined while there are none to read (no file yet). */
  generation(): Promise<number | undefined>;
  /** Every list at one generation; lists whose digest `current` holds need not carry their hashes. */
  load(current: HashListSet): Promise<{ generation: number; lists: LoadedList[] }>;
  close(): Promise<void>;
}

/** HASH_LISTS_FILE, read-only (the admin CLI writes it). */
export function fileSource(file: string): HashListSource {
  let store: HashListStore | undefined;
  const open = () => {
    // No lists file yet: no lists. Any other failure (unreadable, not a lists file) reaches the poller,
    // which logs it and keeps the lists in force.
    if (!store && !existsSync(file)) return undefined;
    store ??= new HashListStore(file, { readOnly: true });
    return store;
  };
  return {
    generation: async () => open()?.generation(),
    load: async () => (open() as HashListStore).loadAll(),
    close: async () => {
      store?.close();
      store = undefined;
    },
  };
}

/** The operator's lists in Redis; an unchanged list (same digest) is not fetched again. */
export function redisSource(
  lists: RedisHashLists,
  connected: () => boolean,
  close: () => Promise<void>,
): HashListSource {
  const kept = new Uint8Array(0);
  return {
    // Not connected yet (or again): nothing to read; the next poll tries again.
    generation: async () => (connected() ? await lists.generation() : undefined),
    load: async (current) =>
      await lists.loadAll((_name, meta) => (current.indexed(meta.digest) ? kept : undefined)),
    close,
  };
}

/**
 * Keeps the source's lists in force: loads them at start, then polls the generation and swaps in a new
 * set once a changed one has loaded. A load that fails keeps the lists in force (logged).
 */
export class HashListWatcher implements HashMatcher {
  #current = HashListSet.EMPTY;
  readonly #config: HashListConfig;
  readonly #source: HashListSource;
  readonly #log: Pick<FastifyBaseLogger, 'info' | 'error'>;
  readonly #counter: Counter<'list' | 'action'> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #reloading: Promise<void> | undefined;

  constructor(
    config: HashListConfig,
    log: Pick<FastifyBaseLogger, 'info' | 'error'>,
    counter?: Counter<'list' | 'action'>,
    source: HashListSource = fileSource(config.file),
  ) {
    this.#config = config;
    this.#source = source;
    this.#log = log;
    this.#counter = counter;
  }

  get current(): HashListSet {
    return this.#current;
  }

  start(): void {
    void this.reload();
    this.#timer = setInterval(() => void this.reload(), this.#config.reloadMs);
    this.#timer.unref();
  }

  /** Loads the lists when their generation moved; one reload at a time. */
  reload(): Promise<void> {
    this.#reloading ??= this.#reload().finally(() => {
      this.#reloading = undefined;
    });
    return this.#reloading;
  }

  async #reload(): Promise<void> {
    try {
      const generation = await this.#source.generation();
      if (generation === undefined || generation === this.#current.generation) return;
      const started = performance.now();
      const { generation: loaded, lists } = await this.#source.load(this.#current);
      // Built in full before the swap: a request sees the previous set until this line.
      this.#current = HashListSet.build(lists, loaded, this.#current);
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

  wantsHash(): boolean {
    return this.#config.always || this.#current.lists.length > 0;
  }

  match(pdq: ImagePdq | undefined): HashListMatch[] {
    if (!pdq || pdq.quality < this.#config.minQuality) return [];
    const matches = this.#current.match(pdq.variants);
    for (const m of matches) this.#counter?.inc({ list: m.list, action: m.action });
    return matches;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#reloading;
    await this.#source.close();
  }
}

/** Registers GET /internal/hash-lists: the lists this process matches against now. */
export function registerHashListReport(app: FastifyInstance, watcher: () => HashListSet | undefined): void {
  app.get(HASH_LIST_REPORT_PATH, async () => {
    const set = watcher();
    return ok<HashListReport>({
      generation: set?.generation ?? 0,
      lists: (set?.lists ?? []).map((l) => ({
        name: l.name,
        action: l.action,
        maxDistance: l.maxDistance,
        hashes: l.index.size,
        digest: l.digest,
      })),
    });
  });
}
