// Copies data written in the earlier, single-Redis layout (P = key prefix: P acct:<id>, P email:<email>,
// P accts, P key:<id>, P keyhash:<sha256>, P acctkeys:<id>, P q:<subject>:m|d, P h:<subject>:<day>)
// into today's (redis-layout.ts): accounts, the email index, keys (revoked ones stay revoked), each
// account's counters with their expiry, and its and its keys' usage history. Sessions and device
// counters kept their names. Not copied: anonymous counters (an IP's count starts again) and charges
// (they live 150 s). The old keys are left in place, so the copy can be run again (it overwrites
// with the same values) and an older release still finds its data. Run by `npm run admin --
// migrate-redis-layout` on the single Redis or the Sentinel primary that holds the old data.

import { accountSubject, keySubject } from '../authorize.ts';
import { DAY_MS, HISTORY_DAYS } from '../quota-store.ts';
import { isCluster, type RedisClient } from './redis-connection.ts';
import { RedisLayout } from './redis-layout.ts';

export async function migrateLegacyLayout(
  redis: RedisClient,
  prefix: string,
): Promise<{ accounts: number; keys: number }> {
  if (isCluster(redis))
    throw new Error('The earlier layout never ran on a Cluster: migrate on the Redis that holds it');
  const l = new RedisLayout(prefix);
  const old = (name: string) => `${prefix}${name}`;
  const today = Math.floor(Date.now() / DAY_MS);
  const days = Array.from({ length: HISTORY_DAYS }, (_, i) => today - i);
  let accounts = 0;
  let keys = 0;
  // Every index entry that names an account (its stored form, and a look-alike form indexed since).
  const emailsOf = new Map<string, string[]>();
  for (const entry of await scanAll(redis, old('email:*'))) {
    const owner = await redis.get(entry);
    if (owner) emailsOf.set(owner, [...(emailsOf.get(owner) ?? []), entry.slice(old('email:').length)]);
  }
  const ids = await redis.zrange(old('accts'), '0', '-1', 'WITHSCORES');
  for (let i = 0; i + 1 < ids.length; i += 2) {
    const [id, score] = [ids[i] as string, ids[i + 1] as string];
    const record = await redis.hgetall(old(`acct:${id}`));
    if (!record.id) continue;
    const write = redis.multi();
    write.hset(l.account(id), record);
    write.zadd(l.accountList(), score, id);
    for (const email of emailsOf.get(id) ?? []) write.set(l.email(email), id);
    for (const suffix of ['m', 'd'] as const) {
      const window = await redis.hgetall(old(`q:${accountSubject(id)}:${suffix}`));
      const ttl = await redis.pttl(old(`q:${accountSubject(id)}:${suffix}`));
      const target = suffix === 'm' ? l.minute(accountSubject(id)) : l.day(accountSubject(id));
      if (window.w && ttl > 0) write.hset(target, window).pexpire(target, ttl);
    }
    await copyHistory(redis, write, l.history(accountSubject(id)), old(`h:${accountSubject(id)}`), days);
    const keyIds = await redis.zrange(old(`acctkeys:${id}`), '0', '-1', 'WITHSCORES');
    for (let k = 0; k + 1 < keyIds.length; k += 2) {
      const [keyId, keyScore] = [keyIds[k] as string, keyIds[k + 1] as string];
      const key = await redis.hgetall(old(`key:${keyId}`));
      if (!key.id) continue;
      write.hset(l.key(id, keyId), key);
      write.zadd(l.accountKeys(id), keyScore, keyId);
      write.set(l.keyAccount(keyId), id);
      if (key.hash && !key.revokedAt && (await redis.get(old(`keyhash:${key.hash}`))) === keyId)
        write.set(l.keyHash(key.hash), `${id} ${keyId}`);
      await copyHistory(redis, write, l.history(keySubject(id, keyId)), old(`h:key:${keyId}`), days);
      keys += 1;
    }
    await write.exec();
    accounts += 1;
  }
  return { accounts, keys };
}

async function copyHistory(
  redis: RedisClient,
  write: ReturnType<RedisClient['multi']>,
  target: string,
  oldBase: string,
  days: number[],
): Promise<void> {
  const fields: Record<string, string> = {};
  for (const day of days) {
    const [s, r] = await redis.hmget(`${oldBase}:${day}`, 's', 'r');
    if (s) fields[`s:${day}`] = s;
    if (r) fields[`r:${day}`] = r;
  }
  if (Object.keys(fields).length === 0) return;
  const today = days[0] as number;
  write.hset(target, { ...fields, last: String(today) });
  write.pexpireat(target, today * DAY_MS + HISTORY_DAYS * DAY_MS);
}

async function scanAll(redis: RedisClient, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  return found;
}
