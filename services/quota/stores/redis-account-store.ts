// AccountStore + SessionStore on Redis (cluster mode, or embedded with REDIS_URL). No cache anywhere:
// the authorization path resolves a key with one script call per request, so a revoked key or a
// changed tier applies to the next request on every replica.
//
// Layout (P = key prefix):
//   P:acct:<accountId>      hash   id, email, tier, passwordHash, createdAt
//   P:email:<email>         string accountId (uniqueness of emails; `normaliseEmail` form, or the older
//                           trim + lowercase form for accounts created before NFKC normalisation)
//   P:accts                 zset   accountId by creation time (ms)
//   P:key:<keyId>           hash   ApiKeyRecord fields + hash (SHA-256 of the secret); '' = null
//   P:keyhash:<sha256>      string keyId (removed on revocation)
//   P:acctkeys:<accountId>  zset   keyId by creation time (ms)
//   P:sess:<sha256(token)>  string JSON Session, expiring with the session
// deleteAccount removes the account's acct, email, accts entry, acctkeys, key and keyhash entries.
// Scripts build some key names from the prefix, so this layout targets a single Redis (or a primary
// with replicas), not Redis Cluster.

import type { Redis } from 'ioredis';
import {
  type Account,
  type AccountStore,
  type AccountTier,
  type ApiKeyRecord,
  type CreatedKey,
  EmailTakenError,
  emailProblem,
  InvalidEmailError,
  isAccountTier,
  legacyNormaliseEmail,
  type NewAccount,
  normaliseEmail,
  type ResolvedKey,
  type Session,
  type SessionStore,
} from '../account-store.ts';
import {
  displayParts,
  generateApiKey,
  generateSessionToken,
  hashApiKey,
  isValidApiKeyFormat,
  newId,
  sha256Hex,
} from '../api-keys.ts';
import { closeRedis, LuaScript } from './redis-connection.ts';

// KEYS: email, acct, accts, legacy email. ARGV: id, email, tier, passwordHash, createdAt, createdAtMs.
const CREATE_ACCOUNT = new LuaScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'email', ARGV[2], 'tier', ARGV[3],
  'passwordHash', ARGV[4], 'createdAt', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
return 1
`);

// KEYS: acct, key, keyhash, acctkeys. ARGV: id, accountId, name, prefix, last4, createdAt, hash, ms.
const CREATE_KEY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'accountId', ARGV[2], 'name', ARGV[3], 'prefix', ARGV[4],
  'last4', ARGV[5], 'createdAt', ARGV[6], 'lastUsedAt', '', 'revokedAt', '', 'hash', ARGV[7])
redis.call('SET', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
return 1
`);

// KEYS: key. ARGV: prefix, owner accountId or '', now. Returns the record (HGETALL) or {}.
const REVOKE_KEY = new LuaScript(`
local f = redis.call('HMGET', KEYS[1], 'accountId', 'hash', 'revokedAt')
if not f[1] then return {} end
if ARGV[2] ~= '' and f[1] ~= ARGV[2] then return {} end
if f[3] == '' or not f[3] then redis.call('HSET', KEYS[1], 'revokedAt', ARGV[3]) end
redis.call('DEL', ARGV[1] .. 'keyhash:' .. f[2])
return redis.call('HGETALL', KEYS[1])
`);

// KEYS: keyhash. ARGV: prefix. Returns {key HGETALL, account HGETALL} or {} (unknown/revoked/orphan).
const RESOLVE_KEY = new LuaScript(`
local id = redis.call('GET', KEYS[1])
if not id then return {} end
local kk = ARGV[1] .. 'key:' .. id
local f = redis.call('HMGET', kk, 'accountId', 'revokedAt')
if not f[1] or (f[2] and f[2] ~= '') then return {} end
local a = redis.call('HGETALL', ARGV[1] .. 'acct:' .. f[1])
if #a == 0 then return {} end
return {redis.call('HGETALL', kk), a}
`);

// KEYS: acct, accts, acctkeys, then the email index keys that may name the account. ARGV: prefix,
// accountId. Deletes every key of the account (record and hash → never resolves again), the email
// index entries that still name this account, and the account. Returns 1 if it existed, else 0.
const DELETE_ACCOUNT = new LuaScript(`
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local kk = ARGV[1] .. 'key:' .. id
  local hash = redis.call('HGET', kk, 'hash')
  if hash and redis.call('GET', ARGV[1] .. 'keyhash:' .. hash) == id then
    redis.call('DEL', ARGV[1] .. 'keyhash:' .. hash)
  end
  redis.call('DEL', kk)
end
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
for i = 4, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2] then redis.call('DEL', KEYS[i]) end
end
return redis.call('DEL', KEYS[1])
`);

// KEYS: acct. ARGV: field, value. Returns the account (HGETALL) or {}.
const SET_ACCOUNT_FIELD = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGETALL', KEYS[1])
`);

// KEYS: key. ARGV: lastUsedAt.
const TOUCH_KEY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'lastUsedAt', ARGV[1]) end
return 1
`);

export function pairs(flat: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!Array.isArray(flat)) return out;
  for (let i = 0; i + 1 < flat.length; i += 2) out[String(flat[i])] = String(flat[i + 1]);
  return out;
}

export function toAccount(h: Record<string, string>): Account | undefined {
  if (!h.id || !isAccountTier(h.tier)) return undefined;
  return {
    id: h.id,
    email: h.email ?? '',
    tier: h.tier,
    passwordHash: h.passwordHash ?? '',
    createdAt: h.createdAt ?? '',
  };
}

export function toKey(h: Record<string, string>): ApiKeyRecord | undefined {
  if (!h.id || !h.accountId) return undefined;
  return {
    id: h.id,
    accountId: h.accountId,
    name: h.name ?? '',
    prefix: h.prefix ?? '',
    last4: h.last4 ?? '',
    createdAt: h.createdAt ?? '',
    lastUsedAt: h.lastUsedAt ? h.lastUsedAt : null,
    revokedAt: h.revokedAt ? h.revokedAt : null,
  };
}

export class RedisAccountStore implements AccountStore, SessionStore {
  readonly #redis: Redis;
  readonly #p: string;

  /** Takes ownership of the connection (closed by `close`). */
  constructor(redis: Redis, keyPrefix: string) {
    this.#redis = redis;
    this.#p = keyPrefix;
  }

  async createAccount(input: NewAccount): Promise<Account> {
    const problem = emailProblem(input.email);
    if (problem) throw new InvalidEmailError(problem);
    const now = new Date();
    const account: Account = {
      id: newId('acc_'),
      email: normaliseEmail(input.email),
      tier: input.tier,
      passwordHash: input.passwordHash ?? '',
      createdAt: now.toISOString(),
    };
    const created = await CREATE_ACCOUNT.run(
      this.#redis,
      [
        `${this.#p}email:${account.email}`,
        `${this.#p}acct:${account.id}`,
        `${this.#p}accts`,
        `${this.#p}email:${legacyNormaliseEmail(input.email)}`,
      ],
      [account.id, account.email, account.tier, account.passwordHash, account.createdAt, now.getTime()],
    );
    if (Number(created) !== 1) throw new EmailTakenError(account.email);
    return account;
  }

  async getAccount(accountId: string): Promise<Account | undefined> {
    return toAccount(await this.#redis.hgetall(`${this.#p}acct:${accountId}`));
  }

  async findAccountByEmail(email: string): Promise<Account | undefined> {
    if (emailProblem(email)) return undefined;
    const key = `${this.#p}email:${normaliseEmail(email)}`;
    const id = await this.#redis.get(key);
    if (id !== null) return this.getAccount(id);
    // An account created before NFKC normalisation is indexed under its trim + lowercase form. Found
    // that way, it is indexed under the normalised form too, so a look-alike sign-up is refused.
    const legacy = `${this.#p}email:${legacyNormaliseEmail(email)}`;
    if (legacy === key) return undefined;
    const legacyId = await this.#redis.get(legacy);
    if (legacyId === null) return undefined;
    await this.#redis.set(key, legacyId, 'NX');
    return this.getAccount(legacyId);
  }

  async listAccounts(): Promise<Account[]> {
    const ids = await this.#redis.zrange(`${this.#p}accts`, '0', '-1');
    const hashes = await this.#hgetallMany(ids.map((id) => `${this.#p}acct:${id}`));
    return hashes.map(toAccount).filter((a): a is Account => a !== undefined);
  }

  setTier(accountId: string, tier: AccountTier): Promise<Account | undefined> {
    return this.#setAccountField(accountId, 'tier', tier);
  }

  setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined> {
    return this.#setAccountField(accountId, 'passwordHash', passwordHash);
  }

  async createKey(accountId: string, opts: { name?: string } = {}): Promise<CreatedKey | undefined> {
    const secret = generateApiKey();
    const now = new Date();
    const record: ApiKeyRecord = {
      id: newId('key_'),
      accountId,
      name: opts.name ?? '',
      ...displayParts(secret),
      createdAt: now.toISOString(),
      lastUsedAt: null,
      revokedAt: null,
    };
    const hash = hashApiKey(secret);
    const created = await CREATE_KEY.run(
      this.#redis,
      [
        `${this.#p}acct:${accountId}`,
        `${this.#p}key:${record.id}`,
        `${this.#p}keyhash:${hash}`,
        `${this.#p}acctkeys:${accountId}`,
      ],
      [
        record.id,
        accountId,
        record.name,
        record.prefix,
        record.last4,
        record.createdAt,
        hash,
        String(now.getTime()),
      ],
    );
    return Number(created) === 1 ? { record, secret } : undefined;
  }

  async listKeys(accountId: string): Promise<ApiKeyRecord[]> {
    const ids = await this.#redis.zrevrange(`${this.#p}acctkeys:${accountId}`, '0', '-1');
    const hashes = await this.#hgetallMany(ids.map((id) => `${this.#p}key:${id}`));
    return hashes.map(toKey).filter((k): k is ApiKeyRecord => k !== undefined);
  }

  async getKey(keyId: string): Promise<ApiKeyRecord | undefined> {
    return toKey(await this.#redis.hgetall(`${this.#p}key:${keyId}`));
  }

  async revokeKey(keyId: string, accountId?: string): Promise<ApiKeyRecord | undefined> {
    const reply = await REVOKE_KEY.run(
      this.#redis,
      [`${this.#p}key:${keyId}`],
      [this.#p, accountId ?? '', new Date().toISOString()],
    );
    return toKey(pairs(reply));
  }

  async resolveKey(secret: string): Promise<ResolvedKey | undefined> {
    if (!isValidApiKeyFormat(secret)) return undefined;
    const reply = await RESOLVE_KEY.run(this.#redis, [`${this.#p}keyhash:${hashApiKey(secret)}`], [this.#p]);
    if (!Array.isArray(reply) || reply.length !== 2) return undefined;
    const key = toKey(pairs(reply[0]));
    const account = toAccount(pairs(reply[1]));
    return key && account ? { key, account } : undefined;
  }

  async touchKey(keyId: string, at: Date = new Date()): Promise<void> {
    await TOUCH_KEY.run(this.#redis, [`${this.#p}key:${keyId}`], [at.toISOString()]);
  }

  async deleteAccount(accountId: string): Promise<boolean> {
    const account = await this.getAccount(accountId);
    // The index may hold the stored form and, for an account from before NFKC normalisation, the
    // normalised form too (added by findAccountByEmail); only entries naming this account go.
    const emails = account
      ? [...new Set([account.email, normaliseEmail(account.email), legacyNormaliseEmail(account.email)])]
      : [];
    const deleted = await DELETE_ACCOUNT.run(
      this.#redis,
      [
        `${this.#p}acct:${accountId}`,
        `${this.#p}accts`,
        `${this.#p}acctkeys:${accountId}`,
        ...emails.map((e) => `${this.#p}email:${e}`),
      ],
      [this.#p, accountId],
    );
    return Number(deleted) === 1;
  }

  async createSession(accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: string }> {
    const token = generateSessionToken();
    const expiresAt = new Date(Date.now() + ttlMs).toISOString();
    const session: Session = { accountId, expiresAt };
    await this.#redis.set(`${this.#p}sess:${sha256Hex(token)}`, JSON.stringify(session), 'PX', ttlMs);
    return { token, expiresAt };
  }

  async resolveSession(token: string): Promise<Session | undefined> {
    const raw = await this.#redis.get(`${this.#p}sess:${sha256Hex(token)}`);
    if (raw === null) return undefined;
    const session = JSON.parse(raw) as Session;
    return Date.parse(session.expiresAt) > Date.now() ? session : undefined;
  }

  async deleteSession(token: string): Promise<void> {
    await this.#redis.del(`${this.#p}sess:${sha256Hex(token)}`);
  }

  close(): Promise<void> {
    return closeRedis(this.#redis);
  }

  async #setAccountField(accountId: string, field: string, value: string): Promise<Account | undefined> {
    const reply = await SET_ACCOUNT_FIELD.run(this.#redis, [`${this.#p}acct:${accountId}`], [field, value]);
    return toAccount(pairs(reply));
  }

  async #hgetallMany(keys: string[]): Promise<Record<string, string>[]> {
    if (keys.length === 0) return [];
    const pipeline = this.#redis.pipeline();
    for (const key of keys) pipeline.hgetall(key);
    const results = (await pipeline.exec()) ?? [];
    return results.map(([err, value]) => {
      if (err) throw err;
      return value as Record<string, string>;
    });
  }
}
