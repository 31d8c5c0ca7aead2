// The hash lists of a cluster, in the Redis the installation already runs: the operator publishes each
// HashList resource's compiled hashes here, every detect replica polls the generation and loads what
// changed. One slot (the `{hashlists}` tag), so a Cluster keeps them on one shard and a change is one
// script:
//
//   P{hashlists}:generation               string  moves with every publication or removal: the time in
//                                                 ms (at least the previous + 1), so a Redis that lost
//                                                 its data never gives an old number to new lists
//   P{hashlists}:lists                    hash    list name → JSON ListMeta (action, distance, count, digest)
//   P{hashlists}:hashes:<digest>:<i>      string  chunk i of the hashes, 32 bytes a hash, ≤ 1 MiB each
//
// Chunks are named by the SHA-256 of the whole list, so they never change once written: a publication
// writes the new chunks first, then switches the list's entry and the generation in one script, then lets
// the old chunks expire (RETIRED_TTL_SECONDS, not deleted at once) so a replica that read the old entry
// just before the switch still finds them. A reader therefore sees a list whole, before or after.

import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { HashList, HashListAction } from './hash-list-store.ts';
import { PDQ_BYTES } from './pdq-hex.ts';

/** 32,768 hashes a chunk: one GET stays short under the command timeout, 31 of them for 1M hashes. */
export const CHUNK_BYTES = 1 << 20;
/** Chunks a pipeline carries (8 MiB): every command is bounded by REDIS_COMMAND_TIMEOUT_MS, and the
 * last of a long pipeline waits for all the bytes before it. */
const CHUNKS_A_ROUND_TRIP = 8;
/** How long a replaced list's chunks outlive it, for readers that started before the switch. */
export const RETIRED_TTL_SECONDS = 120;

export interface ListMeta {
  action: HashListAction;
  maxDistance: number;
  count: number;
  /** SHA-256 (hex) of the hashes: names the chunks, and tells a reader whether its index still holds. */
  digest: string;
  chunks: number;
  publishedAt: string;
}

/** Sets (ARGV[2] = '') or removes a list's entry and moves the generation, in one step. */
const SWITCH = `
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
local now = tonumber(ARGV[3])
local next = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
if now > next then next = now end
redis.call('SET', KEYS[2], next)
return next`;

/** The hashes' digest, as the chunks are named and the replicas report it. */
export function hashesDigest(hashes: Uint8Array): string {
  return createHash('sha256').update(hashes).digest('hex');
}

export class RedisHashLists {
  readonly #redis: Redis | Cluster;
  readonly #generation: string;
  readonly #lists: string;
  readonly #chunkPrefix: string;

  constructor(redis: Redis | Cluster, keyPrefix: string) {
    this.#redis = redis;
    this.#generation = `${keyPrefix}{hashlists}:generation`;
    this.#lists = `${keyPrefix}{hashlists}:lists`;
    this.#chunkPrefix = `${keyPrefix}{hashlists}:hashes:`;
  }

  #chunk(digest: string, i: number): string {
    return `${this.#chunkPrefix}${digest}:${i}`;
  }

  async generation(): Promise<number> {
    return Number((await this.#redis.get(this.#generation)) ?? 0);
  }

  /** Every published list's entry (no hashes). */
  async entries(): Promise<Map<string, ListMeta>> {
    const raw = await this.#redis.hgetall(this.#lists);
    return new Map(Object.entries(raw).map(([name, json]) => [name, JSON.parse(json) as ListMeta]));
  }

  /**
   * Publishes (or replaces) a list. Unchanged (same hashes, action and distance): nothing is written and
   * false is answered, so a resync costs one HGET.
   */
  async publish(
    name: string,
    action: HashListAction,
    maxDistance: number,
    hashes: Uint8Array,
  ): Promise<{ changed: boolean; meta: ListMeta }> {
    const digest = hashesDigest(hashes);
    const before = await this.#entry(name);
    if (before && before.digest === digest && before.action === action && before.maxDistance === maxDistance)
      return { changed: false, meta: before };
    const chunks = Math.ceil(hashes.length / CHUNK_BYTES);
    const meta: ListMeta = {
      action,
      maxDistance,
      count: hashes.length / PDQ_BYTES,
      digest,
      chunks,
      publishedAt: new Date().toISOString(),
    };
    if (before?.digest !== digest) {
      // The chunks first. SET clears any TTL: the same content may be expiring from an earlier version.
      for (let from = 0; from < chunks; from += CHUNKS_A_ROUND_TRIP) {
        const write = this.#redis.pipeline();
        for (let i = from; i < Math.min(chunks, from + CHUNKS_A_ROUND_TRIP); i++) {
          write.set(
            this.#chunk(digest, i),
            Buffer.from(
              hashes.buffer,
              hashes.byteOffset + i * CHUNK_BYTES,
              Math.min(CHUNK_BYTES, hashes.length - i * CHUNK_BYTES),
            ),
          );
        }
        await exec(write);
      }
    }
    await this.#switch(name, JSON.stringify(meta));
    if (before && before.digest !== digest) await this.#retire(before);
    return { changed: true, meta };
  }

  /** Removes the list; false when there was none. */
  async remove(name: string): Promise<boolean> {
    const before = await this.#entry(name);
    if (!before) return false;
    await this.#switch(name, '');
    await this.#retire(before);
    return true;
  }

  /**
   * Every list with its hashes, at one generation. `reuse(name, meta)` answers hashes a reader already
   * holds for that digest (nothing is fetched for them). Throws when the lists changed during the read
   * (a retired chunk gone, or the generation moved): the caller keeps what it has and tries again.
   */
  async loadAll(
    reuse: (name: string, meta: ListMeta) => Uint8Array | undefined = () => undefined,
  ): Promise<{ generation: number; lists: Array<HashList & { digest: string }> }> {
    const read = await exec(this.#redis.multi().get(this.#generation).hgetall(this.#lists));
    const generation = Number(read[0] ?? 0);
    const entries = Object.entries((read[1] ?? {}) as Record<string, string>).sort(([a], [b]) =>
      a.localeCompare(b),
    );
    const lists: Array<HashList & { digest: string }> = [];
    for (const [name, json] of entries) {
      const meta = JSON.parse(json) as ListMeta;
      const hashes = reuse(name, meta) ?? (await this.#fetch(name, meta));
      lists.push({
        name,
        action: meta.action,
        maxDistance: meta.maxDistance,
        count: meta.count,
        importedAt: meta.publishedAt,
        digest: meta.digest,
        hashes,
      });
    }
    return { generation, lists };
  }

  async #fetch(name: string, meta: ListMeta): Promise<Uint8Array> {
    const hashes = new Uint8Array(meta.count * PDQ_BYTES);
    let at = 0;
    for (let from = 0; from < meta.chunks; from += CHUNKS_A_ROUND_TRIP) {
      const read = this.#redis.pipeline();
      for (let i = from; i < Math.min(meta.chunks, from + CHUNKS_A_ROUND_TRIP); i++)
        read.getBuffer(this.#chunk(meta.digest, i));
      for (const chunk of (await exec(read)) as Array<Buffer | null>) {
        if (!chunk) throw new Error(`hash list ${name}: a chunk is gone (replaced meanwhile)`);
        hashes.set(chunk, at);
        at += chunk.length;
      }
    }
    if (at !== hashes.length) throw new Error(`hash list ${name}: ${at} bytes, expected ${hashes.length}`);
    return hashes;
  }

  async #switch(name: string, entry: string): Promise<void> {
    await this.#redis.eval(SWITCH, 2, this.#lists, this.#generation, name, entry, String(Date.now()));
  }

  async #entry(name: string): Promise<ListMeta | undefined> {
    const json = await this.#redis.hget(this.#lists, name);
    return json ? (JSON.parse(json) as ListMeta) : undefined;
  }

  /** The old chunks expire, unless another list still has the same hashes. */
  async #retire(old: ListMeta): Promise<void> {
    for (const meta of (await this.entries()).values()) if (meta.digest === old.digest) return;
    const expire = this.#redis.pipeline();
    for (let i = 0; i < old.chunks; i++) expire.expire(this.#chunk(old.digest, i), RETIRED_TTL_SECONDS);
    await exec(expire);
  }
}

/** Runs a pipeline or MULTI, throwing its first command error; the replies. */
async function exec(batch: ReturnType<Redis['pipeline']>): Promise<unknown[]> {
  const replies = await batch.exec();
  if (!replies) throw new Error('hash lists: the transaction was aborted');
  return replies.map(([err, value]) => {
    if (err) throw err;
    return value;
  });
}
