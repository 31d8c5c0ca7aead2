// Accounts in a real Redis Cluster (3 primaries, 3 replicas): 10,000 accounts with a key each must land
// on every shard — their records, their email-index entries and their key-hash entries alike — so that
// the shards share the growth. Prints the spread per shard and the bytes an account and a key take
// (MEMORY USAGE), the figures docs/accounts-store.md quotes.

import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clusterPrimaries, type RedisTopology, startTopology } from '../../../test/support/redis-topology.ts';
import { describeWithTool, REDIS_CLI, REDIS_SERVER } from '../../../test/support/tools.ts';
import { sha256Hex } from '../accounts/api-keys.ts';
import { RedisAccountStore } from './redis-account-store.ts';
import { connectRedis, redisReady } from './redis-connection.ts';
import { RedisLayout } from './redis-layout.ts';

const ACCOUNTS = 10_000;
const PREFIX = 'spread:';

describeWithTool([REDIS_SERVER, REDIS_CLI], 'accounts in a Redis Cluster (real redis-server)', () => {
  let topology: RedisTopology;
  beforeAll(async () => {
    topology = await startTopology('cluster');
  }, 60_000);
  afterAll(async () => {
    await topology?.stop();
  });

  it(`spreads ${ACCOUNTS.toLocaleString('en')} accounts, their emails and their keys over every shard`, async () => {
    const redis = connectRedis({
      target: topology.endpoint,
      commandTimeoutMs: 5000,
      socketTimeoutMs: 10_000,
      connectTimeoutMs: 1000,
    });
    await redisReady(redis, 5000);
    const store = new RedisAccountStore(redis, PREFIX);
    const primaries = await clusterPrimaries(topology.nodes);
    const nodes = primaries.map((port) => new Redis({ port, host: '127.0.0.1', lazyConnect: true }));
    try {
      const secrets: string[] = [];
      const next = { i: 0 };
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          for (let i = next.i++; i < ACCOUNTS; i = next.i++) {
            const account = await store.createAccount({ email: `spread-${i}@example.com`, tier: 'free' });
            const key = await store.createKey(account.id);
            if (!key) throw new Error('no key');
            if (i < 10) secrets.push(key.secret);
          }
        }),
      );
      // Each primary's share, by what the key is.
      const l = new RedisLayout(PREFIX);
      const kinds = {
        accounts: (k: string) => /\{acct:[^}]+\}acct$/.test(k),
        emails: (k: string) => k.startsWith(`${PREFIX}{email:`),
        keyHashes: (k: string) => k.startsWith(`${PREFIX}{kh:`),
      };
      const spread: Array<Record<keyof typeof kinds, number> & { port: number; usedMemoryMiB: number }> = [];
      for (const [i, node] of nodes.entries()) {
        const counts = { accounts: 0, emails: 0, keyHashes: 0 };
        let cursor = '0';
        do {
          const [nextCursor, keys] = await node.scan(cursor, 'MATCH', `${PREFIX}*`, 'COUNT', 2000);
          cursor = nextCursor;
          for (const key of keys)
            for (const [kind, test] of Object.entries(kinds))
              if (test(key)) counts[kind as keyof typeof kinds]++;
        } while (cursor !== '0');
        const info = String(await node.info('memory'));
        const usedMemory = Number(/used_memory:(\d+)/.exec(info)?.[1]);
        spread.push({ port: primaries[i] as number, ...counts, usedMemoryMiB: usedMemory / 1024 / 1024 });
      }
      console.log(
        `${ACCOUNTS.toLocaleString('en')} accounts with a key each, per shard:\n${spread
          .map(
            (s) =>
              `  primary :${s.port}: ${s.accounts} account records, ${s.emails} email entries, ${s.keyHashes} key-hash entries (used_memory ${s.usedMemoryMiB.toFixed(1)} MiB)`,
          )
          .join('\n')}`,
      );
      for (const kind of Object.keys(kinds) as Array<keyof typeof kinds>) {
        expect(
          spread.reduce((n, s) => n + s[kind], 0),
          kind,
        ).toBe(ACCOUNTS);
        // An even share is a third; no shard may go without, nor take most.
        for (const s of spread) {
          expect(s[kind], `${kind} on :${s.port}`).toBeGreaterThan(ACCOUNTS * 0.2);
          expect(s[kind], `${kind} on :${s.port}`).toBeLessThan(ACCOUNTS * 0.5);
        }
      }

      // What one account and one key cost: MEMORY USAGE of each record, on the primary of its slot.
      const usage = async (key: string) => {
        // Only the primary of the key's slot answers (the others redirect: MOVED).
        for (const node of nodes) {
          const bytes = await node.memory('USAGE', key, 'SAMPLES', '0').catch(() => null);
          if (typeof bytes === 'number') return bytes;
        }
        throw new Error(`no primary holds ${key}`);
      };
      const account = await store.findAccountByEmail('spread-3@example.com');
      const resolved = await store.resolveKey(secrets[0] as string);
      if (!account || !resolved) throw new Error('sample account not found');
      const { key } = resolved;
      const perAccount = (await usage(l.account(account.id))) + (await usage(l.email(account.email)));
      const perKey =
        (await usage(l.key(key.accountId, key.id))) +
        (await usage(l.keyHash(sha256Hex(secrets[0] as string)))) +
        (await usage(l.keyAccount(key.id))) +
        (await usage(l.accountKeys(key.accountId)));
      console.log(
        `bytes (MEMORY USAGE): an account ${perAccount} (record + email entry); a key ${perKey} (record + key-hash entry + key-id entry + the account's key list holding it)`,
      );
      expect(perAccount).toBeGreaterThan(0);
      expect(perKey).toBeGreaterThan(0);
      // The admin CLI's listing finds them all, on every shard.
      expect((await store.listAccounts()).length).toBe(ACCOUNTS);
    } finally {
      for (const node of nodes) node.disconnect();
      await store.close();
    }
  }, 600_000);
});
