// The embedded AccountStore + SessionStore: accounts, key hashes and session hashes in one SQLite
// database (Node's built-in `node:sqlite`), at ACCOUNTS_FILE, or in memory for tests.
//
// - Every write is one short transaction on indexed tables: O(log n) in the number of accounts, keys
//   and sessions, whatever their count; memory use does not grow with them (a bounded page cache).
// - WAL journal, synchronous=FULL: a write is acknowledged only once it is in the log on disk, so
//   `kill -9` (or a power cut) at any moment loses no acknowledged write, and SQLite's recovery at the
//   next open replays or drops the log as a whole; nothing else lies beside the file to clean up.
// - Every write is an explicit transaction whose COMMIT is checked (`#write`), its statements stepped
//   to completion: an autocommit statement read with `.get()` is reset after its first row, and the
//   reset's COMMIT failure (disk full, read-only) and its WAL checkpoint would both be lost. A write
//   that cannot commit rejects with StoreWriteError and leaves nothing of itself.
// - Several processes (the server and the admin CLI) share the file: readers never wait (WAL), a
//   writer waits for another's transaction up to BUSY_TIMEOUT_MS. Every read goes to the database (no
//   cache), so a key revoked or a tier changed by the CLI applies to the server's very next request.
// - An accounts JSON file (the store's earlier format) found at ACCOUNTS_FILE is imported once, in one
//   transaction into a new database that then replaces it by rename; the JSON stays beside it as
//   `<ACCOUNTS_FILE>.json-backup` (json-accounts-import.ts).
// The database file itself (schema, connection settings, opening ACCOUNTS_FILE): accounts-database.ts.

import { randomBytes } from 'node:crypto';
import type { DatabaseSync } from 'node:sqlite';
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
  KEY_PREFIX,
  newId,
  sha256Hex,
} from '../accounts/api-keys.ts';
import { TOUCH_INTERVAL_MS } from '../authorize.ts';
import { CACHE_KIB, openAccountsFile, openDatabase } from './accounts-database.ts';

/** The page cache while creating accounts in bulk (benchmarks), in KiB. */
const BULK_CACHE_KIB = 1024 * 1024;
/** Expired sessions are swept by every this-many-th session created (each sweep is indexed). */
const SESSION_SWEEP_EVERY = 64;

interface AccountRow {
  id: string;
  email: string;
  tier: string;
  password_hash: string;
  created_at: string;
}

interface KeyRow {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  last4: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

function toAccount(row: AccountRow | undefined): Account | undefined {
  if (!row || !isAccountTier(row.tier)) return undefined;
  return {
    id: row.id,
    email: row.email,
    tier: row.tier,
    passwordHash: row.password_hash,
    createdAt: row.created_at,
  };
}

function toKey(row: KeyRow | undefined): ApiKeyRecord | undefined {
  if (!row) return undefined;
  return {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    prefix: row.prefix,
    last4: row.last4,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    revokedAt: row.revoked_at,
  };
}

/** Every statement the store runs, prepared once per connection. */
function prepareStatements(db: DatabaseSync) {
  const p = (sql: string) => db.prepare(sql);
  const keyColumns =
    'k.id, k.account_id, k.name, k.prefix, k.last4, k.created_at, k.last_used_at, k.revoked_at';
  return {
    insertAccount: p(
      'INSERT INTO accounts (id, email, tier, password_hash, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    // A taken email rewrites its row unchanged: the same durable write (one WAL commit) as a new
    // account, so the time a sign-up takes does not tell whether the email was free.
    claimAccount: p(
      `INSERT INTO accounts (id, email, tier, password_hash, created_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (email) DO UPDATE SET email = excluded.email RETURNING id`,
    ),
    accountById: p('SELECT * FROM accounts WHERE id = ?'),
    accountByEmail: p('SELECT * FROM accounts WHERE email = ?'),
    allAccounts: p('SELECT * FROM accounts ORDER BY created_at, rowid'),
    setTier: p('UPDATE accounts SET tier = ? WHERE id = ? RETURNING *'),
    setPassword: p('UPDATE accounts SET password_hash = ? WHERE id = ? RETURNING *'),
    deleteAccount: p('DELETE FROM accounts WHERE id = ?'),
    pruneUnused: p(
      `DELETE FROM accounts WHERE created_at < ? AND password_hash <> ''
       AND NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.account_id = accounts.id)`,
    ),
    insertKey: p(
      `INSERT INTO api_keys (id, account_id, name, prefix, last4, created_at, hash)
       SELECT ?, id, ?, ?, ?, ?, ? FROM accounts WHERE id = ?`,
    ),
    keysOf: p(
      `SELECT ${keyColumns} FROM api_keys k WHERE k.account_id = ? ORDER BY k.created_at DESC, k.rowid DESC`,
    ),
    keyById: p(`SELECT ${keyColumns} FROM api_keys k WHERE k.id = ?`),
    activeKeys: p('SELECT count(*) AS n FROM api_keys WHERE account_id = ? AND revoked_at IS NULL'),
    revokeKey: p('UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?'),
    resolveKey: p(
      `SELECT ${keyColumns}, a.email, a.tier, a.password_hash, a.created_at AS account_created_at
       FROM api_keys k JOIN accounts a ON a.id = k.account_id
       WHERE k.hash = ? AND k.revoked_at IS NULL`,
    ),
    // Only when the recorded use is older than the interval: at most one write per key per interval.
    touchKey: p(
      'UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)',
    ),
    insertSession: p(
      'INSERT INTO sessions (token_hash, account_id, expires_at, expires_ms) SELECT ?, id, ?, ? FROM accounts WHERE id = ?',
    ),
    sessionByHash: p('SELECT account_id, expires_at, expires_ms FROM sessions WHERE token_hash = ?'),
    deleteSession: p('DELETE FROM sessions WHERE token_hash = ?'),
    sweepSessions: p('DELETE FROM sessions WHERE expires_ms <= ?'),
  };
}

export class SqliteAccountStore implements AccountStore, SessionStore {
  readonly #db: DatabaseSync;
  readonly #s: ReturnType<typeof prepareStatements>;
  readonly #touchIntervalMs: number;
  /** synchronous = FULL, which touchKey relaxes for its own commit only. */
  readonly #durable: boolean;
  #sessionsCreated = 0;

  constructor(db: DatabaseSync, opts: AccountStoreOptions = {}) {
    this.#db = db;
    this.#touchIntervalMs = opts.touchIntervalMs ?? TOUCH_INTERVAL_MS;
    this.#durable = (db.prepare('PRAGMA synchronous').get() as { synchronous: number }).synchronous === 2;
    this.#s = prepareStatements(db);
  }

  /**
   * Runs `work` in one write transaction (taken at once, so it never has to be retried) and returns
   * its result only once COMMIT has succeeded. A database failure (disk full, read-only, I/O) rolls
   * everything back and rejects with StoreWriteError; the store's own refusals pass through as they are.
   */
  #write<T>(work: () => T): T {
    try {
      this.#db.exec('BEGIN IMMEDIATE');
      try {
        const result = work();
        this.#db.exec('COMMIT');
        return result;
      } catch (err) {
        if (this.#db.isTransaction) this.#db.exec('ROLLBACK');
        throw err;
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ERR_SQLITE_ERROR')
        throw new StoreWriteError(
          `the accounts database did not save the change: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      throw err;
    }
  }

  async createAccount(input: NewAccount): Promise<Account> {
    const problem = emailProblem(input.email);
    if (problem) throw new InvalidEmailError(problem);
    const account: Account = {
      id: newId('acc_'),
      email: normaliseEmail(input.email),
      tier: input.tier,
      passwordHash: input.passwordHash ?? '',
      createdAt: new Date().toISOString(),
    };
    const [row] = this.#write(() =>
      this.#s.claimAccount.all(
        account.id,
        account.email,
        account.tier,
        account.passwordHash,
        account.createdAt,
      ),
    ) as Array<{ id: string }>;
    if (row?.id !== account.id) throw new EmailTakenError(account.email);
    return account;
  }

  /**
   * Benchmarks: `count` accounts (emails from `email(i)`, no password), each with one key, in one
   * transaction; `onKey` sees every secret as it is made. Far faster than one createAccount each:
   * randomness drawn in blocks, the parent check of each key skipped (its account was just inserted),
   * and a page cache large enough for the indexes while it runs.
   */
  bulkCreateAccounts(
    count: number,
    email: (i: number) => string,
    onKey?: (i: number, secret: string) => void,
  ): void {
    const createdAt = new Date().toISOString();
    const insertKey = this.#db.prepare(
      'INSERT INTO api_keys (id, account_id, name, prefix, last4, created_at, hash) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    this.#db.exec(`PRAGMA cache_size = -${BULK_CACHE_KIB}`);
    this.#db.exec('PRAGMA foreign_keys = OFF');
    try {
      this.#write(() => {
        const BLOCK = 4096;
        let random = '';
        for (let i = 0; i < count; i++) {
          const o = (i % BLOCK) * 64;
          if (o === 0) random = randomBytes(32 * BLOCK).toString('hex');
          const accountId = `acc_${random.slice(o, o + 16)}`;
          const secret = `${KEY_PREFIX}${random.slice(o + 32, o + 64)}`;
          const { prefix, last4 } = displayParts(secret);
          this.#s.insertAccount.run(accountId, normaliseEmail(email(i)), 'free', '', createdAt);
          insertKey.run(
            `key_${random.slice(o + 16, o + 32)}`,
            accountId,
            '',
            prefix,
            last4,
            createdAt,
            sha256Hex(secret),
          );
          onKey?.(i, secret);
        }
      });
    } finally {
      this.#db.exec('PRAGMA foreign_keys = ON');
      this.#db.exec(`PRAGMA cache_size = -${CACHE_KIB}`);
    }
  }

  async getAccount(accountId: string): Promise<Account | undefined> {
    return toAccount(this.#s.accountById.get(accountId) as AccountRow | undefined);
  }

  async findAccountByEmail(email: string): Promise<Account | undefined> {
    if (emailProblem(email)) return undefined;
    return toAccount(this.#s.accountByEmail.get(normaliseEmail(email)) as AccountRow | undefined);
  }

  async listAccounts(): Promise<Account[]> {
    const rows = this.#s.allAccounts.all() as unknown as AccountRow[];
    return rows.map(toAccount).filter((a): a is Account => a !== undefined);
  }

  async setTier(accountId: string, tier: AccountTier): Promise<Account | undefined> {
    const [row] = this.#write(() => this.#s.setTier.all(tier, accountId)) as unknown as AccountRow[];
    return toAccount(row);
  }

  async setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined> {
    const [row] = this.#write(() =>
      this.#s.setPassword.all(passwordHash, accountId),
    ) as unknown as AccountRow[];
    return toAccount(row);
  }

  async createKey(
    accountId: string,
    opts: { name?: string; maxActive?: number } = {},
  ): Promise<CreatedKey | undefined> {
    const secret = generateApiKey();
    const record: ApiKeyRecord = {
      id: newId('key_'),
      accountId,
      name: opts.name ?? '',
      ...displayParts(secret),
      createdAt: new Date().toISOString(),
      lastUsedAt: null,
      revokedAt: null,
    };
    // Counted and inserted in one transaction: concurrent creations never pass the limit together.
    // Inserted only when the account exists (the SELECT yields no row otherwise).
    const changes = this.#write(() => {
      const { maxActive } = opts;
      if (maxActive !== undefined) {
        const { n } = this.#s.activeKeys.get(accountId) as { n: number };
        if (n >= maxActive) throw new KeyLimitError(maxActive);
      }
      return this.#s.insertKey.run(
        record.id,
        record.name,
        record.prefix,
        record.last4,
        record.createdAt,
        sha256Hex(secret),
        accountId,
      ).changes;
    });
    return Number(changes) === 1 ? { record, secret } : undefined;
  }

  async listKeys(accountId: string): Promise<ApiKeyRecord[]> {
    const rows = this.#s.keysOf.all(accountId) as unknown as KeyRow[];
    return rows.map((r) => toKey(r) as ApiKeyRecord);
  }

  async getKey(keyId: string): Promise<ApiKeyRecord | undefined> {
    return toKey(this.#s.keyById.get(keyId) as KeyRow | undefined);
  }

  async revokeKey(keyId: string, accountId?: string): Promise<ApiKeyRecord | undefined> {
    return this.#write(() => {
      const key = toKey(this.#s.keyById.get(keyId) as KeyRow | undefined);
      if (!key || (accountId !== undefined && key.accountId !== accountId)) return undefined;
      this.#s.revokeKey.run(new Date().toISOString(), keyId);
      return toKey(this.#s.keyById.get(keyId) as KeyRow | undefined);
    });
  }

  async resolveKey(secret: string): Promise<ResolvedKey | undefined> {
    if (!isValidApiKeyFormat(secret)) return undefined;
    const row = this.#s.resolveKey.get(sha256Hex(secret)) as
      | (KeyRow & { email: string; tier: string; password_hash: string; account_created_at: string })
      | undefined;
    if (!row) return undefined;
    const account = toAccount({
      id: row.account_id,
      email: row.email,
      tier: row.tier,
      password_hash: row.password_hash,
      created_at: row.account_created_at,
    });
    const key = toKey(row);
    return account && key ? { key, account } : undefined;
  }

  async touchKey(keyId: string, at: Date = new Date()): Promise<void> {
    // On the request path and best effort: committed without waiting for the disk (a crash of the
    // process still keeps it; a power cut may lose the last ones), so a detect never waits for an
    // fsync. The next durable commit makes it durable too. A use recorded less than
    // touchIntervalMs before `at` is kept as it is: the UPDATE changes no row and writes no log.
    const since = new Date(at.getTime() - this.#touchIntervalMs).toISOString();
    if (this.#durable) this.#db.exec('PRAGMA synchronous = NORMAL');
    try {
      this.#write(() => this.#s.touchKey.run(at.toISOString(), keyId, since));
    } finally {
      if (this.#durable) this.#db.exec('PRAGMA synchronous = FULL');
    }
  }

  async deleteAccount(accountId: string): Promise<boolean> {
    // Keys and sessions go with it (ON DELETE CASCADE), in the same transaction.
    return Number(this.#write(() => this.#s.deleteAccount.run(accountId).changes)) === 1;
  }

  async pruneUnusedAccounts(createdBefore: Date): Promise<number> {
    // One statement: an account that gets a key meanwhile is not deleted (the write lock orders them).
    return Number(this.#write(() => this.#s.pruneUnused.run(createdBefore.toISOString()).changes));
  }

  async createSession(accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: string }> {
    const token = generateSessionToken();
    const expiresMs = Date.now() + ttlMs;
    const expiresAt = new Date(expiresMs).toISOString();
    const sweep = ++this.#sessionsCreated % SESSION_SWEEP_EVERY === 1;
    this.#write(() => {
      if (sweep) this.#s.sweepSessions.run(Date.now());
      // A session of an account that does not exist (deleted meanwhile) is not kept: it would log nobody in.
      this.#s.insertSession.run(sha256Hex(token), expiresAt, expiresMs, accountId);
    });
    return { token, expiresAt };
  }

  async resolveSession(token: string): Promise<Session | undefined> {
    const row = this.#s.sessionByHash.get(sha256Hex(token)) as
      | { account_id: string; expires_at: string; expires_ms: number }
      | undefined;
    return row && row.expires_ms > Date.now()
      ? { accountId: row.account_id, expiresAt: row.expires_at }
      : undefined;
  }

  async deleteSession(token: string): Promise<void> {
    this.#write(() => this.#s.deleteSession.run(sha256Hex(token)));
  }

  async close(): Promise<void> {
    if (this.#db.isOpen) this.#db.close();
  }
}

/** Accounts in memory only (tests). */
export function memoryAccountStore(opts: AccountStoreOptions = {}): SqliteAccountStore {
  return new SqliteAccountStore(openDatabase(':memory:'), opts);
}

/**
 * The embedded store at `path` (the server, the admin CLI): creates the database when missing, imports
 * an accounts JSON file found there first. Refuses anything else rather than overwrite it.
 */
export function openSqliteAccountStore(path: string, opts: AccountStoreOptions = {}): SqliteAccountStore {
  return new SqliteAccountStore(openAccountsFile(path), opts);
}
