// The chart's Redis backed up and restored as docs/redis.md says, on a real redis-server run as the
// chart runs it (AOF on, `appendfsync everysec`, data in one directory): BGSAVE, copy dump.rdb; then a
// fresh server whose AOF directory is built from that copy (its base file, an empty increment, the
// manifest) starts with every account and key of the backup, and nothing written after it.

import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { RedisServer } from '../../../test/support/redis-server.ts';
import { describeWithTool, REDIS_SERVER } from '../../../test/support/tools.ts';
import type { CreatedKey } from '../accounts/account-store.ts';
import { RedisAccountStore } from './redis-account-store.ts';
import { connectRedis, type RedisClient, redisReady } from './redis-connection.ts';

const dir = mkdtempSync(join(tmpdir(), 'nsfwd-redis-backup-'));
const servers: RedisServer[] = [];
const stores: RedisAccountStore[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

/** redis-server as the chart starts it, its data in `dataDir`. */
async function chartRedis(dataDir: string): Promise<{ store: RedisAccountStore; redis: RedisClient }> {
  const server = await RedisServer.start({
    args: ['--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dataDir],
  });
  servers.push(server);
  const redis = connectRedis({
    target: server.url,
    commandTimeoutMs: 5000,
    socketTimeoutMs: 10_000,
    connectTimeoutMs: 2000,
  });
  await redisReady(redis, 5000);
  const store = new RedisAccountStore(redis, 'nsfwdetector:');
  stores.push(store);
  return { store, redis };
}

describeWithTool(REDIS_SERVER, "the chart's Redis: backup and restore", () => {
  it('BGSAVE, copy dump.rdb, start a fresh server on it: the accounts and keys are there', async () => {
    const live = join(dir, 'live');
    mkdirSync(live);
    const { store, redis } = await chartRedis(live);
    const keys: Array<{ email: string; key: CreatedKey }> = [];
    for (let i = 0; i < 25; i++) {
      const email = `backed-${i}@example.com`;
      const account = await store.createAccount({ email, tier: i % 2 ? 'pro' : 'free' });
      const key = await store.createKey(account.id, { name: `k${i}` });
      if (!key) throw new Error('key not created');
      keys.push({ email, key });
    }

    // The backup: a snapshot, then its file copied away once the save has finished.
    await redis.bgsave();
    let info = '';
    for (let i = 0; i < 400; i++) {
      info = await redis.info('persistence');
      if (info.includes('rdb_bgsave_in_progress:0')) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(info).toContain('rdb_bgsave_in_progress:0');
    expect(info).toContain('rdb_last_bgsave_status:ok');
    const backup = join(dir, 'backup.rdb');
    copyFileSync(join(live, 'dump.rdb'), backup);
    const late = await store.createAccount({ email: 'after-backup@example.com', tier: 'free' });

    // The restore, as on the chart's volume: with AOF on, Redis loads the AOF directory and ignores a
    // dump.rdb, so the copy becomes the AOF's base file (a base may be an RDB).
    const restored = join(dir, 'restored');
    mkdirSync(join(restored, 'appendonlydir'), { recursive: true });
    copyFileSync(backup, join(restored, 'appendonlydir', 'appendonly.aof.1.base.rdb'));
    writeFileSync(join(restored, 'appendonlydir', 'appendonly.aof.1.incr.aof'), '');
    writeFileSync(
      join(restored, 'appendonlydir', 'appendonly.aof.manifest'),
      'file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n',
    );
    const { store: fresh } = await chartRedis(restored);
    for (const { email, key } of keys) {
      const account = await fresh.findAccountByEmail(email);
      expect(account?.id, email).toBe(key.record.accountId);
      expect((await fresh.resolveKey(key.secret))?.key.id, email).toBe(key.record.id);
    }
    expect(await fresh.getAccount(late.id)).toBeUndefined();
    expect((await fresh.listAccounts()).length).toBe(keys.length);
  });
});
