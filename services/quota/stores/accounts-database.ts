// The embedded store's database file (sqlite-account-store.ts holds what is done in it): its schema
// and version, the connection settings that make every acknowledged write durable and bound memory at
// any size, and the opening of ACCOUNTS_FILE — created when missing with owner-only access, imported
// first when it still holds the accounts JSON file (json-accounts-import.ts), refused when it is
// anything else rather than overwritten.

import { closeSync, mkdirSync, openSync, readSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { AccountsFileError } from './accounts-file-error.ts';
import { importJsonAccounts } from './json-accounts-import.ts';

/** How long a write waits for another process's transaction before failing. */
const BUSY_TIMEOUT_MS = 5_000;
/**
 * The write-ahead log: checkpointed into the database by the commit that takes it past this many pages
 * (SQLite's autocheckpoint: every write here runs to its COMMIT, so it always runs), and cut back to
 * WAL_LIMIT_BYTES afterwards. The log holds at most the last few MiB of writes, whatever the traffic.
 */
const WAL_CHECKPOINT_PAGES = 1000;
export const WAL_LIMIT_BYTES = 4 * 1024 * 1024;
/** The page cache per connection, in KiB (SQLite's negative cache_size): bounds memory at any size. */
export const CACHE_KIB = 8 * 1024;
export const SCHEMA_VERSION = 1;
const SQLITE_MAGIC = 'SQLite format 3\0';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS accounts (
  id            TEXT PRIMARY KEY,
  email         TEXT NOT NULL UNIQUE,
  tier          TEXT NOT NULL,
  password_hash TEXT NOT NULL,
  created_at    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS accounts_created ON accounts (created_at);
CREATE TABLE IF NOT EXISTS api_keys (
  id           TEXT PRIMARY KEY,
  account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
  name         TEXT NOT NULL,
  prefix       TEXT NOT NULL,
  last4        TEXT NOT NULL,
  created_at   TEXT NOT NULL,
  last_used_at TEXT,
  revoked_at   TEXT,
  hash         TEXT NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS api_keys_account ON api_keys (account_id, created_at);
CREATE TABLE IF NOT EXISTS sessions (
  token_hash  TEXT PRIMARY KEY,
  account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
  expires_at  TEXT NOT NULL,
  expires_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_account ON sessions (account_id);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_ms);
`;

/** Opens (creating when missing) a database at `path`, or in memory for ':memory:'. */
export function openDatabase(path: string): DatabaseSync {
  const db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS, enableForeignKeyConstraints: true });
  try {
    if (path !== ':memory:') {
      db.exec('PRAGMA journal_mode = WAL');
      // A process killed in the middle of anything keeps every commit; FULL also survives power loss.
      db.exec('PRAGMA synchronous = FULL');
      db.exec(`PRAGMA wal_autocheckpoint = ${WAL_CHECKPOINT_PAGES}`);
      db.exec(`PRAGMA journal_size_limit = ${WAL_LIMIT_BYTES}`);
    }
    db.exec(`PRAGMA cache_size = -${CACHE_KIB}`);
    const version = (db.prepare('PRAGMA user_version').get() as { user_version: number }).user_version;
    if (version > SCHEMA_VERSION)
      throw new AccountsFileError(
        `ACCOUNTS_FILE ${path} has schema version ${version}; this release knows up to ${SCHEMA_VERSION}`,
      );
    if (version < SCHEMA_VERSION) {
      db.exec('BEGIN IMMEDIATE');
      try {
        db.exec(SCHEMA);
        db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
        db.exec('COMMIT');
      } catch (err) {
        db.exec('ROLLBACK');
        throw err;
      }
    }
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/** What the first bytes of `path` are: a database, something else, or nothing yet. */
function fileKind(path: string): 'missing' | 'sqlite' | 'other' {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw new AccountsFileError(`cannot read ACCOUNTS_FILE ${path}`, { cause: err });
  }
  try {
    const head = Buffer.alloc(SQLITE_MAGIC.length);
    const n = readSync(fd, head, 0, head.length, 0);
    if (n === 0) return 'missing';
    return head.toString('latin1', 0, n) === SQLITE_MAGIC ? 'sqlite' : 'other';
  } catch (err) {
    throw new AccountsFileError(`cannot read ACCOUNTS_FILE ${path}`, { cause: err });
  } finally {
    closeSync(fd);
  }
}

/** The database at ACCOUNTS_FILE `path`, made ready to use (see the file's header). */
export function openAccountsFile(path: string): DatabaseSync {
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (err) {
    throw new AccountsFileError(`cannot create the directory of ACCOUNTS_FILE ${path}`, { cause: err });
  }
  const kind = fileKind(path);
  if (kind === 'other') {
    importJsonAccounts(path, openDatabase);
  }
  if (kind === 'missing') {
    // Created here with owner-only access: SQLite gives its -wal and -shm files the same mode.
    try {
      writeFileSync(path, '', { flag: 'a', mode: 0o600 });
    } catch (err) {
      throw new AccountsFileError(`cannot create ACCOUNTS_FILE ${path}`, { cause: err });
    }
  }
  let db: DatabaseSync;
  try {
    db = openDatabase(path);
  } catch (err) {
    if (err instanceof AccountsFileError) throw err;
    throw new AccountsFileError(`cannot open ACCOUNTS_FILE ${path}`, { cause: err });
  }
  return db;
}
