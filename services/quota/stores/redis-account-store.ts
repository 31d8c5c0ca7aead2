// AccountStore + SessionStore on Redis (a single Redis, Sentinel or Cluster). No cache anywhere: the
// authorization path resolves a key on every request, so a revoked key or a changed tier applies to
// the next request on every replica. Layout: redis-layout.ts.
//
// What is atomic: every write within one slot (an account with its keys; one email-index entry; one
// key-hash entry). A change across slots is ordered so that, cut half-way, it leaves nothing that acts
// wrongly, and the next write repairs it:
//   create account  record (invisible until indexed) → claim the email in the index. An email left
//                   claimed by an account whose deletion did not finish is reclaimed by the next
//                   sign-up with it; a record whose claim was refused is removed (one left by a cut is
//                   never found by email, and listAccounts skips it only if it has no email entry).
//   create key      record + account's list → key-id entry → key-hash entry. Cut before the last, the
//                   key is listed but never resolves (its secret was never shown); it can be revoked.
//   revoke key      revokedAt on the record (refused from then on) → key-hash entry removed.
//   delete account  record and keys (refused from then on) → key-hash and key-id entries → email
//                   index entry.
// No index holds every account (it would sit in one slot, on one shard): listAccounts scans the
// account records on every primary (admin CLI).
// Writes that create or change accounts, keys, tiers and revocations wait for `replication.replicas`
// replicas (WAIT, in the same round trip); fewer acknowledgements reject (NotReplicatedError → 503).
// A write Redis refuses (OOM: `maxmemory` reached with `noeviction`; MISCONF: a failed save with
// stop-writes-on-bgsave-error; READONLY: a demoted primary) rejects with StoreWriteError. Each script
// is all or nothing there: Redis decides OOM and MISCONF once, before a script's first write.
// The active-keys limit is counted and enforced inside CREATE_KEY, in the account's slot: one step.

import {
  type Account,
  type AccountStore,
  type AccountStoreOptions,
  type AccountTier,
  type ApiKeyRecord,
  type CreatedKey,
  EmailTakenError,
  emailProblem,
  InvalidEmailError,
  isAccountTier,
  KeyLimitError,
  type NewAccount,
  normaliseEmail,
  type ResolvedKey,
  type Session,
  type SessionStore,
  StoreWriteError,
} from '../accounts/account-store.ts';
import {
  displayParts,
  generateApiKey,
  generateSessionToken,
  isValidApiKeyFormat,
  newId,
  sha256Hex,
} from '../accounts/api-keys.ts';
import { TOUCH_INTERVAL_MS } from '../authorize.ts';
import {
  closeRedis,
  isCluster,
  LuaScript,
  NO_REPLICATION,
  queueScript,
  type RedisClient,
  type Replication,
  writeReplicated,
} from './redis-connection.ts';
import { RedisLayout } from './redis-layout.ts';

// KEYS: email. ARGV: id, the owner expected ('' none). Claims the email for the account unless someone
// other than the expected owner holds it; a claim over an expected owner (an orphan) replaces it.
// Returns '' when claimed, else the holder.
const CLAIM_EMAIL = new LuaScript(`
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[2] then return cur end
redis.call('SET', KEYS[1], ARGV[1])
return ''
`);

// KEYS: acct, key, account's keys. ARGV: id, accountId, name, prefix, last4, createdAt, hash, ms,
// the most active keys allowed ('' for no limit). Returns 1 created, 0 no such account, -1 at the
// limit. The count reads each listed key's revokedAt (an account's keys, revoked ones included).
const CREATE_KEY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[9] ~= '' then
  local active = 0
  local prefix = string.sub(KEYS[3], 1, #KEYS[3] - 4)
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local revoked = redis.call('HGET', prefix .. 'key:' .. id, 'revokedAt')
    if revoked == '' then active = active + 1 end
  end
  if active >= tonumber(ARGV[9]) then return -1 end
end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'accountId', ARGV[2], 'name', ARGV[3], 'prefix', ARGV[4],
  'last4', ARGV[5], 'createdAt', ARGV[6], 'lastUsedAt', '', 'revokedAt', '', 'hash', ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[8], ARGV[1])
return 1
`);

// KEYS: key. ARGV: owner accountId or '', now. Returns the record (HGETALL) or {}.
const REVOKE_KEY = new LuaScript(`
local f = redis.call('HMGET', KEYS[1], 'accountId', 'revokedAt')
if not f[1] then return {} end
if ARGV[1] ~= '' and f[1] ~= ARGV[1] then return {} end
if f[2] == '' or not f[2] then redis.call('HSET', KEYS[1], 'revokedAt', ARGV[2]) end
return redis.call('HGETALL', KEYS[1])
`);

// KEYS: an index entry. ARGV: the value it must hold. Deletes it only then (compare and delete).
const DELETE_IF = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

// KEYS: key, acct. Returns {key HGETALL, account HGETALL} or {} (unknown/revoked/orphan).
const RESOLVE_IN_ACCOUNT = new LuaScript(`
local f = redis.call('HMGET', KEYS[1], 'accountId', 'revokedAt')
if not f[1] or (f[2] and f[2] ~= '') then return {} end
local a = redis.call('HGETALL', KEYS[2])
if #a == 0 then return {} end
return {redis.call('HGETALL', KEYS[1]), a}
`);

// KEYS: acct, account's keys, then each of its key records. Deletes them all if the keys given are
// all the account has (else -1: a key was created meanwhile, read again). Returns {existed, hash of
// each key, in KEYS order}.
const DELETE_ACCOUNT = new LuaScript(`
if redis.call('ZCARD', KEYS[2]) ~= #KEYS - 2 then return -1 end
local out = {redis.call('EXISTS', KEYS[1])}
for i = 3, #KEYS do
  out[#out + 1] = redis.call('HGET', KEYS[i], 'hash') or ''
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1], KEYS[2])
return out
`);

// KEYS: acct, account's keys. ARGV: createdAt cut-off (ISO). Deletes the account only if it has a
// password, was created before the cut-off and has no key (atomic in its slot: a key made meanwhile
// keeps it). Returns the email it held, or '' when kept.
const PRUNE_IF_UNUSED = new LuaScript(`
local a = redis.call('HMGET', KEYS[1], 'email', 'passwordHash', 'createdAt')
if not a[1] or not a[2] or a[2] == '' or not a[3] or a[3] >= ARGV[1] then return '' end
if redis.call('EXISTS', KEYS[2]) == 1 then return '' end
redis.call('DEL', KEYS[1])
return a[1]
`);

// KEYS: acct. ARGV: field, value. Returns the account (HGETALL) or {}.
const SET_ACCOUNT_FIELD = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGETALL', KEYS[1])
`);

// KEYS: key, account's keys. ARGV: id. Takes back a key whose indexes could not be written: its
// record and its place in the list (DEL and ZREM are allowed even when Redis is out of memory).
const UNDO_KEY = new LuaScript(`
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
`);

// KEYS: key. ARGV: lastUsedAt, the time before which a recorded use is rewritten (ISO). At most one
// write per key per interval: a use recorded after ARGV[2] is kept.
const TOUCH_KEY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local last = redis.call('HGET', KEYS[1], 'lastUsedAt')
if last and last ~= '' and last > ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'lastUsedAt', ARGV[1])
return 1
`);

/** Redis's refusals of a write (not a lost connection: that one may have run). */
const REFUSED_WRITE = /^(OOM|MISCONF|READONLY|NOREPLICAS) /;

/** A write Redis refused as StoreWriteError, with what it said; anything else as it is. */
function refusedWrite(err: unknown): unknown {
  if (err instanceof Error && REFUSED_WRITE.test(err.message))
    return new StoreWriteError(`Redis did not save the change: ${err.message}`, { cause: err });
  return err;
}

/** The key-hash index's value: where the key lives. */
export function keyHashEntry(accountId: string, keyId: string): string {
  return `${accountId} ${keyId}`;
}

export function parseKeyHashEntry(value: string | null): { accountId: string; keyId: string } | undefined {
  const [accountId, keyId] = (value ?? '').split(' ');
  return accountId && keyId ? { accountId, keyId } : undefined;
}

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
  readonly #redis: RedisClient;
  readonly #l: RedisLayout;
  readonly #replication: Replication;
  readonly #touchIntervalMs: number;

  /** Takes ownership of the connection (closed by `close`). */
  constructor(
    redis: RedisClient,
    keyPrefix: string,
    replication: Replication = NO_REPLICATION,
    opts: AccountStoreOptions = {},
  ) {
    this.#redis = redis;
    this.#l = new RedisLayout(keyPrefix);
    this.#replication = replication;
    this.#touchIntervalMs = opts.touchIntervalMs ?? TOUCH_INTERVAL_MS;
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
    const record = this.#l.account(account.id);
    await this.#write(record, (p) => p.hset(record, { ...account }));
    const emailKey = this.#l.email(account.email);
    let expected = '';
    for (let attempt = 0; attempt < 3; attempt++) {
      let holder: unknown;
      try {
        [holder] = await this.#write(emailKey, (p) =>
          queueScript(p, CLAIM_EMAIL, [emailKey], [account.id, expected]),
        );
      } catch (err) {
        // Never indexed, so never found; removed when Redis lets us (DEL is allowed when out of memory).
        await this.#redis.del(record).catch(() => undefined);
        throw err;
      }
      if (holder === '') return account;
      // Held by an account that exists: taken. Held by one that does not (a deletion cut half-way):
      // reclaimed, unless someone else claims it first.
      if (await this.getAccount(String(holder))) break;
      expected = String(holder);
    }
    await this.#redis.del(record);
    throw new EmailTakenError(account.email);
  }

  async getAccount(accountId: string): Promise<Account | undefined> {
    return toAccount(await this.#redis.hgetall(this.#l.account(accountId)));
  }

  async findAccountByEmail(email: string): Promise<Account | undefined> {
    if (emailProblem(email)) return undefined;
    const id = await this.#redis.get(this.#l.email(normaliseEmail(email)));
    return id === null ? undefined : this.getAccount(id);
  }

  /** Every account, oldest first: the records scanned on each primary (O(accounts); admin only). */
  async listAccounts(): Promise<Account[]> {
    const nodes = isCluster(this.#redis) ? this.#redis.nodes('master') : [this.#redis];
    const accounts: Account[] = [];
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', this.#l.accountPattern(), 'COUNT', 1000);
        cursor = next;
        for (const key of keys) {
          const account = toAccount(await this.#redis.hgetall(key));
          // A record whose email claim was cut short is nobody's account: only indexed ones count.
          if (account && (await this.#redis.get(this.#l.email(account.email))) === account.id)
            accounts.push(account);
        }
      } while (cursor !== '0');
    }
    return accounts.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  setTier(accountId: string, tier: AccountTier): Promise<Account | undefined> {
    return this.#setAccountField(accountId, 'tier', tier);
  }

  setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined> {
    return this.#setAccountField(accountId, 'passwordHash', passwordHash);
  }

  async createKey(
    accountId: string,
    opts: { name?: string; maxActive?: number } = {},
  ): Promise<CreatedKey | undefined> {
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
    const hash = sha256Hex(secret);
    const [created] = await this.#write(this.#l.account(accountId), (p) =>
      queueScript(
        p,
        CREATE_KEY,
        [this.#l.account(accountId), this.#l.key(accountId, record.id), this.#l.accountKeys(accountId)],
        [
          record.id,
          accountId,
          record.name,
          record.prefix,
          record.last4,
          record.createdAt,
          hash,
          String(now.getTime()),
          opts.maxActive === undefined ? '' : String(opts.maxActive),
        ],
      ),
    );
    if (Number(created) === -1) throw new KeyLimitError(opts.maxActive ?? 0);
    if (Number(created) !== 1) return undefined;
    const keyAccount = this.#l.keyAccount(record.id);
    const keyHash = this.#l.keyHash(hash);
    try {
      await this.#write(keyAccount, (p) => p.set(keyAccount, accountId));
      await this.#write(keyHash, (p) => p.set(keyHash, keyHashEntry(accountId, record.id)));
    } catch (err) {
      // Its secret is never shown, so the key is taken back (else it would stay listed, counted as
      // active, never resolving, until revoked).
      await UNDO_KEY.run(
        this.#redis,
        [this.#l.key(accountId, record.id), this.#l.accountKeys(accountId)],
        [record.id],
      ).catch(() => undefined);
      throw err;
    }
    return { record, secret };
  }

  async listKeys(accountId: string): Promise<ApiKeyRecord[]> {
    const ids = await this.#redis.zrevrange(this.#l.accountKeys(accountId), '0', '-1');
    if (ids.length === 0) return [];
    const pipeline = this.#redis.pipeline();
    for (const id of ids) pipeline.hgetall(this.#l.key(accountId, id));
    const hashes = ((await pipeline.exec()) ?? []).map(([err, value]) => {
      if (err) throw err;
      return value as Record<string, string>;
    });
    return hashes.map(toKey).filter((k): k is ApiKeyRecord => k !== undefined);
  }

  async getKey(keyId: string): Promise<ApiKeyRecord | undefined> {
    const accountId = await this.#redis.get(this.#l.keyAccount(keyId));
    if (accountId === null) return undefined;
    return toKey(await this.#redis.hgetall(this.#l.key(accountId, keyId)));
  }

  async revokeKey(keyId: string, accountId?: string): Promise<ApiKeyRecord | undefined> {
    const owner = accountId ?? (await this.#redis.get(this.#l.keyAccount(keyId)));
    if (owner === null) return undefined;
    const keyRecord = this.#l.key(owner, keyId);
    const [reply] = await this.#write(keyRecord, (p) =>
      queueScript(p, REVOKE_KEY, [keyRecord], [accountId ?? '', new Date().toISOString()]),
    );
    const fields = pairs(reply);
    const key = toKey(fields);
    if (key && fields.hash)
      await this.#run(DELETE_IF, [this.#l.keyHash(fields.hash)], [keyHashEntry(owner, keyId)]);
    return key;
  }

  async resolveKey(secret: string): Promise<ResolvedKey | undefined> {
    if (!isValidApiKeyFormat(secret)) return undefined;
    const where = parseKeyHashEntry(await this.#redis.get(this.#l.keyHash(sha256Hex(secret))));
    if (!where) return undefined;
    const reply = await RESOLVE_IN_ACCOUNT.run(
      this.#redis,
      [this.#l.key(where.accountId, where.keyId), this.#l.account(where.accountId)],
      [],
    );
    if (!Array.isArray(reply) || reply.length !== 2) return undefined;
    const key = toKey(pairs(reply[0]));
    const account = toAccount(pairs(reply[1]));
    return key && account ? { key, account } : undefined;
  }

  async touchKey(keyId: string, at: Date = new Date()): Promise<void> {
    const accountId = await this.#redis.get(this.#l.keyAccount(keyId));
    if (accountId === null) return;
    const since = new Date(at.getTime() - this.#touchIntervalMs).toISOString();
    await this.#run(TOUCH_KEY, [this.#l.key(accountId, keyId)], [at.toISOString(), since]);
  }

  async deleteAccount(accountId: string): Promise<boolean> {
    const account = await this.getAccount(accountId);
    let reply: unknown;
    let ids: string[] = [];
    do {
      ids = await this.#redis.zrange(this.#l.accountKeys(accountId), '0', '-1');
      const keys = [
        this.#l.account(accountId),
        this.#l.accountKeys(accountId),
        ...ids.map((id) => this.#l.key(accountId, id)),
      ];
      [reply] = await this.#write(this.#l.account(accountId), (p) =>
        queueScript(p, DELETE_ACCOUNT, keys, []),
      );
    } while (reply === -1);
    const [existed, ...hashes] = reply as Array<number | string>;
    await Promise.all(
      ids.flatMap((id, i) => [
        this.#run(DELETE_IF, [this.#l.keyHash(String(hashes[i]))], [keyHashEntry(accountId, id)]),
        this.#run(DELETE_IF, [this.#l.keyAccount(id)], [accountId]),
      ]),
    );
    // Only an entry naming this account goes (the email may belong to a newer account already).
    if (account) await this.#run(DELETE_IF, [this.#l.email(account.email)], [accountId]);
    return Number(existed) === 1;
  }

  async pruneUnusedAccounts(createdBefore: Date): Promise<number> {
    let pruned = 0;
    const cutOff = createdBefore.toISOString();
    for (const account of await this.listAccounts()) {
      if (account.passwordHash === '' || account.createdAt >= cutOff) continue;
      const record = this.#l.account(account.id);
      const [email] = await this.#write(record, (p) =>
        queueScript(p, PRUNE_IF_UNUSED, [record, this.#l.accountKeys(account.id)], [cutOff]),
      );
      if (!email) continue;
      await this.#run(DELETE_IF, [this.#l.email(String(email))], [account.id]);
      pruned++;
    }
    return pruned;
  }

  async createSession(accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: string }> {
    const token = generateSessionToken();
    const expiresAt = new Date(Date.now() + ttlMs).toISOString();
    const session: Session = { accountId, expiresAt };
    try {
      await this.#redis.set(this.#l.session(sha256Hex(token)), JSON.stringify(session), 'PX', ttlMs);
    } catch (err) {
      throw refusedWrite(err);
    }
    return { token, expiresAt };
  }

  async resolveSession(token: string): Promise<Session | undefined> {
    const raw = await this.#redis.get(this.#l.session(sha256Hex(token)));
    if (raw === null) return undefined;
    const session = JSON.parse(raw) as Session;
    return Date.parse(session.expiresAt) > Date.now() ? session : undefined;
  }

  async deleteSession(token: string): Promise<void> {
    try {
      await this.#redis.del(this.#l.session(sha256Hex(token)));
    } catch (err) {
      throw refusedWrite(err);
    }
  }

  close(): Promise<void> {
    return closeRedis(this.#redis);
  }

  async #run(script: LuaScript, keys: string[], args: string[]): Promise<unknown> {
    try {
      return await script.run(this.#redis, keys, args);
    } catch (err) {
      throw refusedWrite(err);
    }
  }

  async #write(slotKey: string, write: Parameters<typeof writeReplicated>[3]): Promise<unknown[]> {
    try {
      return await writeReplicated(this.#redis, this.#replication, slotKey, write);
    } catch (err) {
      throw refusedWrite(err);
    }
  }

  async #setAccountField(accountId: string, field: string, value: string): Promise<Account | undefined> {
    const record = this.#l.account(accountId);
    const [reply] = await this.#write(record, (p) =>
      queueScript(p, SET_ACCOUNT_FIELD, [record], [field, value]),
    );
    return toAccount(pairs(reply));
  }
}
