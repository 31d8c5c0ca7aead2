// Online backup and offline restore of the embedded store's database (`npm run admin -- backup FILE`,
// `restore FILE`; docs/accounts-store.md).
//
// Backup: SQLite's online backup API (node:sqlite `backup`), all pages in one step, so the copy is one
// read snapshot of the database: consistent, whatever the server writes meanwhile (WAL: the server's
// writes never wait for it, and it never restarts as a stepped backup would when the source changes
// between steps). The copy is written beside FILE (owner-only, like the store), turned into a
// stand-alone file (rollback journal, no -wal to carry), checked with `PRAGMA integrity_check`, then
// renamed into place: FILE is either the previous one or a complete, checked copy.
//
// Restore: refused while anything has ACCOUNTS_FILE open (the server, another admin command): in WAL
// mode every open connection holds a shared lock on the database for as long as it is open, so an
// exclusive lock is only granted to a process that is alone — the test of "the server is stopped",
// without a pid file that a crash would leave behind. Holding that lock, the backup's rows replace the
// store's in one transaction whose COMMIT is checked: a failed restore (disk full) leaves the store as
// it was, and a server that starts meanwhile waits for it, then fails to open rather than read half.

import { chmodSync, closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync } from 'node:fs';
import { backup, DatabaseSync } from 'node:sqlite';
import { openAccountsFile, SCHEMA_VERSION } from './accounts-database.ts';
import { AccountsFileError } from './accounts-file-error.ts';

/** All pages in one step (node:sqlite wants a positive 32-bit count). */
const ALL_PAGES = 2 ** 31 - 1;
/** The store's tables, parents first (rows are copied in this order, deleted in the reverse). */
const TABLES = ['accounts', 'api_keys', 'sessions'] as const;

/** The store is open elsewhere (restore needs it alone). */
export class StoreInUseError extends Error {
  override name = 'StoreInUseError';
}

export interface BackupResult {
  accounts: number;
  bytes: number;
}

function integrityProblem(db: DatabaseSync): string | undefined {
  const rows = db.prepare('PRAGMA integrity_check').all() as Array<{ integrity_check: string }>;
  const lines = rows.map((r) => r.integrity_check);
  return lines.length === 1 && lines[0] === 'ok' ? undefined : lines.slice(0, 5).join('; ');
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Copies the database at `source` (ACCOUNTS_FILE, in use or not) to `target`, consistently. */
export async function backupAccountsFile(source: string, target: string): Promise<BackupResult> {
  if (!existsSync(source)) throw new AccountsFileError(`no ACCOUNTS_FILE at ${source}: nothing to back up`);
  const db = openAccountsFile(source);
  const partial = `${target}.partial`;
  try {
    rmSync(partial, { force: true });
    // Owner-only from its first byte: it holds password hashes.
    closeSync(openSync(partial, 'w', 0o600));
    chmodSync(partial, 0o600);
    await backup(db, partial, { rate: ALL_PAGES });
    const copy = new DatabaseSync(partial);
    try {
      // A stand-alone file: no -wal beside it to lose when it is moved.
      copy.exec('PRAGMA journal_mode = DELETE');
      const problem = integrityProblem(copy);
      if (problem)
        throw new AccountsFileError(`the copy at ${partial} fails PRAGMA integrity_check: ${problem}`);
      const { n } = copy.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number };
      const { size } = copy
        .prepare('SELECT page_count * page_size AS size FROM pragma_page_count, pragma_page_size')
        .get() as {
        size: number;
      };
      copy.close();
      fsyncPath(partial);
      renameSync(partial, target);
      return { accounts: n, bytes: size };
    } finally {
      if (copy.isOpen) copy.close();
    }
  } catch (err) {
    rmSync(partial, { force: true });
    throw err;
  } finally {
    db.close();
  }
}

/** Puts the backup at `source` back as the database at `target` (ACCOUNTS_FILE); refused while in use. */
export function restoreAccountsFile(source: string, target: string): { accounts: number } {
  let backupDb: DatabaseSync;
  try {
    backupDb = new DatabaseSync(source, { readOnly: true });
  } catch (err) {
    throw new AccountsFileError(`cannot open the backup ${source}`, { cause: err });
  }
  try {
    const problem = integrityProblem(backupDb);
    if (problem) throw new AccountsFileError(`the backup ${source} fails PRAGMA integrity_check: ${problem}`);
    const version = (backupDb.prepare('PRAGMA user_version').get() as { user_version: number }).user_version;
    if (version !== SCHEMA_VERSION)
      throw new AccountsFileError(
        `the backup ${source} has schema version ${version}; this release restores version ${SCHEMA_VERSION}`,
      );
  } catch (err) {
    if (err instanceof AccountsFileError) throw err;
    throw new AccountsFileError(`${source} is not a backup of the accounts database`, { cause: err });
  } finally {
    backupDb.close();
  }

  // Created as the server would when missing; then taken alone on a connection of its own, in
  // exclusive locking mode from its first access (so it asks for the file's exclusive lock, which any
  // other open connection's shared lock refuses at once).
  if (!existsSync(target)) openAccountsFile(target).close();
  const db = new DatabaseSync(target, { timeout: 0 });
  try {
    try {
      db.exec('PRAGMA locking_mode = EXCLUSIVE');
      db.exec('BEGIN EXCLUSIVE');
    } catch (err) {
      throw new StoreInUseError(
        `ACCOUNTS_FILE ${target} is in use (the server, or another admin command, has it open): stop the server first, then restore`,
        { cause: err },
      );
    }
    try {
      db.prepare('ATTACH DATABASE ? AS restored').run(source);
      for (const table of [...TABLES].reverse()) db.exec(`DELETE FROM main.${table}`);
      for (const table of TABLES) db.exec(`INSERT INTO main.${table} SELECT * FROM restored.${table}`);
      const { n } = db.prepare('SELECT count(*) AS n FROM main.accounts').get() as { n: number };
      db.exec('COMMIT');
      db.exec('DETACH DATABASE restored');
      db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      return { accounts: n };
    } catch (err) {
      if (db.isTransaction) db.exec('ROLLBACK');
      throw new AccountsFileError(`the restore into ${target} failed; the store is as it was`, {
        cause: err,
      });
    }
  } finally {
    db.close();
  }
}
