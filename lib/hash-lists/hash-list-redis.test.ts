// The lists as the operator publishes them and detect replicas read them, on a real redis-server: a list
// over several chunks reads back whole; an unchanged publication writes nothing; a replaced list's old
// chunks expire rather than vanish (a reader mid-load still finds them); a reader reuses what it holds.

import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { RedisServer } from '../../test/support/redis-server.ts';
import { describeWithTool, REDIS_SERVER } from '../../test/support/tools.ts';
import { CHUNK_BYTES, hashesDigest, RETIRED_TTL_SECONDS, RedisHashLists } from './hash-list-redis.ts';
import { PDQ_BYTES } from './pdq-hex.ts';

function hashes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n * PDQ_BYTES);
  let x = seed;
  for (let i = 0; i < out.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

describeWithTool([REDIS_SERVER], 'hash lists published to Redis', () => {
  let server: RedisServer;
  let redis: Redis;
  let lists: RedisHashLists;

  beforeAll(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.url);
    lists = new RedisHashLists(redis, 'test:');
  });

  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('moves the generation past the time in ms, so a Redis that lost its data gives new lists a new number', async () => {
    const before = Date.now();
    await lists.publish('clock', 'block', 31, hashes(1, 9));
    expect(await lists.generation()).toBeGreaterThanOrEqual(before);
    await redis.set('test:{hashlists}:generation', String(Date.now() + 60_000));
    const ahead = await lists.generation();
    await lists.remove('clock');
    expect(await lists.generation()).toBe(ahead + 1);
  });

  it('publishes a list over several chunks and reads it back whole, with its generation', async () => {
    // Ten chunks: more than one pipeline round trip (8 chunks each).
    const big = hashes(Math.floor((CHUNK_BYTES * 9.5) / PDQ_BYTES), 1);
    const first = await lists.publish('big', 'block', 31, big);
    expect(first.changed).toBe(true);
    expect(first.meta).toMatchObject({
      chunks: 10,
      count: big.length / PDQ_BYTES,
      digest: hashesDigest(big),
    });
    await lists.publish('small', 'review', 20, hashes(3, 2));
    const { generation, lists: loaded } = await lists.loadAll();
    expect(generation).toBe(await lists.generation());
    expect(loaded.map((l) => [l.name, l.action, l.maxDistance, l.count])).toEqual([
      ['big', 'block', 31, big.length / PDQ_BYTES],
      ['small', 'review', 20, 3],
    ]);
    expect(Buffer.from(loaded[0]?.hashes as Uint8Array).equals(Buffer.from(big))).toBe(true);
  });

  it('writes nothing for an unchanged list, and reuses what a reader holds', async () => {
    const before = await lists.generation();
    expect((await lists.publish('small', 'review', 20, hashes(3, 2))).changed).toBe(false);
    expect(await lists.generation()).toBe(before);
    const held = new Uint8Array(0);
    const { lists: loaded } = await lists.loadAll((name) => (name === 'big' ? held : undefined));
    expect(loaded[0]?.hashes).toBe(held);
  });

  it('lets a replaced or removed list expire its chunks instead of deleting them at once', async () => {
    const old = (await lists.entries()).get('small');
    await lists.publish('small', 'review', 20, hashes(4, 3));
    const ttl = await redis.ttl(`test:{hashlists}:hashes:${old?.digest}:0`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(RETIRED_TTL_SECONDS);
    const generation = await lists.generation();
    expect(await lists.remove('small')).toBe(true);
    expect(await lists.remove('small')).toBe(false);
    expect(await lists.generation()).toBeGreaterThan(generation);
    expect([...(await lists.entries()).keys()]).toEqual(['big']);
  });
});
