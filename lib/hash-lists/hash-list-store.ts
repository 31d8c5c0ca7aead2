// The embedded hash lists: an SQLite file of their own beside the accounts database (HASH_LISTS_FILE),
// readable by its owner only. A list is one row — name, action, maximum distance and its hashes as one
// blob of 32 bytes a hash — so an import replaces a list in one transaction (all or nothing, never half a
// list) and a reader loads it in one read. `generation` grows with every change: the detect process
// polls it and reloads only when it moved.

import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { PDQ_BYTES } from './pdq-hex.ts';

export const HASH_LIST_ACTIONS = ['block', 'review'] as const;
export type HashListAction = (typeof HASH_LIST_ACTIONS)[number];

/** A list's name: what the answer's `matches[].list` says, so short and plain. */
export const LIST_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export interface HashListInfo {
  name: string;
  action: HashListAction;
  maxDistance: number;
  count: number;
  importedAt: string;
}

export interface HashList extends HashListInfo {
  /** 32 bytes a hash. */
  hashes: Uint8Array;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS hash_lists (
  name         TEXT PRIMARY KEY,
  action       TEXT NOT NULL,
  max_distance INTEGER NOT NULL,
  count        INTEGER NOT NULL,
  hashes       BLOB NOT NULL,
  imported_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS generation (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO generation (id, value) VALUES (1, 0);
`;

export class HashListStore {
  readonly #db: DatabaseSync;

  /** Opens (creating it, owner-only, when missing) the lists file. `readOnly`: never creates or writes. */
  constructor(file: string, opts: { readOnly?: boolean } = {}) {
    const fresh = !existsSync(file);
    if (fresh && opts.readOnly) throw new Error(`no hash lists file at ${file}`);
    if (fresh) mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    this.#db = new DatabaseSync(file, { readOnly: opts.readOnly ?? false, timeout: 5_000 });
    if (!opts.readOnly) {
      this.#db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;');
      this.#db.exec(SCHEMA);
      if (fresh) chmodSync(file, 0o600);
    }
  }

  /** Grows with every import and removal. */
  generation(): number {
    const row = this.#db.prepare('SELECT value FROM generation WHERE id = 1').get() as
      | { value: number }
      | undefined;
    return row?.value ?? 0;
  }

  /** Replaces (or creates) the list in one transaction. */
  put(name: string, action: HashListAction, maxDistance: number, hashes: Uint8Array): void {
    if (!LIST_NAME.test(name))
      throw new Error(`invalid list name ${JSON.stringify(name)}: ${LIST_NAME.source}`);
    this.#write(() => {
      this.#db
        .prepare(
          `INSERT INTO hash_lists (name, action, max_distance, count, hashes, imported_at) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET action = excluded.action, max_distance = excluded.max_distance,
             count = excluded.count, hashes = excluded.hashes, imported_at = excluded.imported_at`,
        )
        .run(name, action, maxDistance, hashes.length / PDQ_BYTES, hashes, new Date().toISOString());
    });
  }

  /** Removes the list; false when there was none. */
  remove(name: string): boolean {
    let removed = false;
    this.#write(() => {
      removed = Number(this.#db.prepare('DELETE FROM hash_lists WHERE name = ?').run(name).changes) > 0;
    });
    return removed;
  }

  list(): HashListInfo[] {
    const rows = this.#db
      .prepare('SELECT name, action, max_distance, count, imported_at FROM hash_lists ORDER BY name')
      .all() as {
      name: string;
      action: HashListAction;
      max_distance: number;
      count: number;
      imported_at: string;
    }[];
    return rows.map((r) => ({
      name: r.name,
      action: r.action,
      maxDistance: r.max_distance,
      count: r.count,
      importedAt: r.imported_at,
    }));
  }

  /** Every list with its hashes, and the generation they are of (one read transaction). */
  loadAll(): { generation: number; lists: HashList[] } {
    this.#db.exec('BEGIN');
    try {
      const generation = this.generation();
      const rows = this.#db
        .prepare(
          'SELECT name, action, max_distance, count, hashes, imported_at FROM hash_lists ORDER BY name',
        )
        .all() as {
        name: string;
        action: HashListAction;
        max_distance: number;
        count: number;
        hashes: Uint8Array;
        imported_at: string;
      }[];
      return {
        generation,
        lists: rows.map((r) => ({
          name: r.name,
          action: r.action,
          maxDistance: r.max_distance,
          count: r.count,
          hashes: r.hashes,
          importedAt: r.imported_at,
        })),
      };
    } finally {
      this.#db.exec('COMMIT');
    }
  }

  close(): void {
    this.#db.close();
  }

  #write(change: () => void): void {
    this.#db.exec('BEGIN IMMEDIATE');
    try {
      change();
      this.#db.exec('UPDATE generation SET value = value + 1 WHERE id = 1');
      this.#db.exec('COMMIT');
    } catch (err) {
      this.#db.exec('ROLLBACK');
      throw err;
    }
  }
}
