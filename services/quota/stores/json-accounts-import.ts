// The embedded store's earlier format, one JSON file ({version: 1, accounts, keys, sessions}), imported
// once into SQLite when ACCOUNTS_FILE still holds it. Atomic: the database is built complete beside
// the file (one transaction, closed, synced) and then renamed over it, so the path holds either the
// whole JSON or the whole database, whenever the process dies; a copy of the JSON is kept first, as
// `<ACCOUNTS_FILE>.json-backup`. Processes starting together import once: an import lock file
// (`<ACCOUNTS_FILE>.import-lock`, naming its pid) serialises them, and whoever comes second finds the
// database already there. A dead importer's lock and half-built database are removed by the next one.

import { randomBytes } from 'node:crypto';
import {
  closeSync,
  copyFileSync,
  fsyncSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import { isAccountTier, normaliseEmail } from '../accounts/account-store.ts';
import { AccountsFileError } from './accounts-file-error.ts';

interface JsonAccount {
  id: string;
  email: string;
  tier: string;
  passwordHash?: string;
  createdAt: string;
}

interface JsonKey {
  id: string;
  accountId: string;
  name?: string;
  prefix?: string;
  last4?: string;
  createdAt: string;
  lastUsedAt?: string | null;
  revokedAt?: string | null;
  hash: string;
}

interface JsonState {
  version: 1;
  accounts: Record<string, JsonAccount>;
  keys: Record<string, JsonKey>;
  sessions: Record<string, { accountId: string; expiresAt: string }>;
}

const LOCK_WAIT_MS = 30_000;

/** Where the JSON is kept once imported. */
export function jsonBackupPath(path: string): string {
  return `${path}.json-backup`;
}

function parseJsonState(text: string, path: string): JsonState {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new AccountsFileError(
      `ACCOUNTS_FILE ${path} is neither an accounts database nor an accounts JSON file`,
      { cause: err },
    );
  }
  const bad = (what: string) => new AccountsFileError(`ACCOUNTS_FILE ${path}: ${what}`);
  if (typeof raw !== 'object' || raw === null) throw bad('not an object');
  const s = raw as Partial<JsonState>;
  if (s.version !== 1) throw bad(`unknown version ${JSON.stringify(s.version)} (expected 1)`);
  for (const field of ['accounts', 'keys', 'sessions'] as const) {
    if (typeof s[field] !== 'object' || s[field] === null) throw bad(`"${field}" must be an object`);
  }
  for (const [id, a] of Object.entries(s.accounts ?? {})) {
    if (a?.id !== id || typeof a.email !== 'string' || !isAccountTier(a.tier))
      throw bad(`account ${id} is malformed`);
  }
  for (const [id, k] of Object.entries(s.keys ?? {})) {
    if (k?.id !== id || typeof k.hash !== 'string' || typeof k.accountId !== 'string')
      throw bad(`key ${id} is malformed`);
  }
  return s as JsonState;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the import lock (waiting for a live holder, removing a dead one's); returns its release. */
function lockImport(path: string): () => void {
  const lock = `${path}.import-lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx', mode: 0o600 });
      return () => rmSync(lock, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST')
        throw new AccountsFileError(`cannot lock ACCOUNTS_FILE ${path} for its import`, { cause: err });
    }
    let holder = Number.NaN;
    try {
      holder = Number(readFileSync(lock, 'utf8'));
    } catch {
      continue; // released meanwhile
    }
    // A holder that died (or an unreadable lock: one that died while writing its pid) is gone for good.
    if (!Number.isSafeInteger(holder) || holder <= 0 || !processAlive(holder)) {
      rmSync(lock, { force: true });
      continue;
    }
    if (Date.now() > deadline)
      throw new AccountsFileError(`ACCOUNTS_FILE ${path} stayed locked for its import by process ${holder}`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  }
}

/** Removes half-built databases of importers that died (they hold key and password hashes). */
function removeLeftovers(path: string): void {
  const dir = dirname(path);
  const prefix = `${basename(path)}.importing-`;
  for (const name of readdirSync(dir)) if (name.startsWith(prefix)) rmSync(join(dir, name), { force: true });
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Replaces the accounts JSON file at `path` by a database holding the same accounts, keys and live
 * sessions. `open` makes an empty database (schema included) at a given path.
 */
export function importJsonAccounts(path: string, open: (at: string) => DatabaseSync): void {
  const release = lockImport(path);
  try {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new AccountsFileError(`cannot read ACCOUNTS_FILE ${path}`, { cause: err });
    }
    // Another process imported it while this one waited for the lock.
    if (text.startsWith('SQLite format 3\0')) return;
    const state = parseJsonState(text, path);
    removeLeftovers(path);
    const building = `${path}.importing-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      writeFileSync(building, '', { flag: 'wx', mode: 0o600 });
      const db = open(building);
      try {
        fill(db, state, path);
      } finally {
        db.close();
      }
      fsyncPath(building);
      copyFileSync(path, jsonBackupPath(path));
      fsyncPath(jsonBackupPath(path));
      renameSync(building, path);
      fsyncPath(dirname(path));
    } catch (err) {
      rmSync(building, { force: true });
      if (err instanceof AccountsFileError) throw err;
      throw new AccountsFileError(`cannot import the accounts JSON file ${path}`, { cause: err });
    }
  } finally {
    release();
  }
}

function fill(db: DatabaseSync, state: JsonState, path: string): void {
  const insertAccount = db.prepare(
    'INSERT INTO accounts (id, email, tier, password_hash, created_at) VALUES (?, ?, ?, ?, ?)',
  );
  const insertKey = db.prepare(
    `INSERT INTO api_keys (id, account_id, name, prefix, last4, created_at, last_used_at, revoked_at, hash)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const insertSession = db.prepare(
    'INSERT INTO sessions (token_hash, account_id, expires_at, expires_ms) VALUES (?, ?, ?, ?)',
  );
  const accounts = Object.values(state.accounts).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  const now = Date.now();
  db.exec('BEGIN IMMEDIATE');
  try {
    const taken = new Set<string>();
    for (const a of accounts) {
      // Stored before NFKC normalisation, an email is normalised now; the rare later look-alike of an
      // older account keeps its stored form (the older one owns the address).
      const normal = normaliseEmail(a.email);
      const email = taken.has(normal) ? a.email : normal;
      if (taken.has(email))
        throw new AccountsFileError(`ACCOUNTS_FILE ${path}: email ${email} appears twice`);
      taken.add(email);
      insertAccount.run(a.id, email, a.tier, a.passwordHash ?? '', a.createdAt);
    }
    for (const k of Object.values(state.keys)) {
      if (!state.accounts[k.accountId]) continue;
      insertKey.run(
        k.id,
        k.accountId,
        k.name ?? '',
        k.prefix ?? '',
        k.last4 ?? '',
        k.createdAt,
        k.lastUsedAt ?? null,
        k.revokedAt ?? null,
        k.hash,
      );
    }
    for (const [hash, s] of Object.entries(state.sessions)) {
      const expiresMs = Date.parse(s.expiresAt);
      if (!(expiresMs > now) || !state.accounts[s.accountId]) continue;
      insertSession.run(hash, s.accountId, s.expiresAt, expiresMs);
    }
    db.exec('COMMIT');
  } catch (err) {
    db.exec('ROLLBACK');
    throw err;
  }
}
