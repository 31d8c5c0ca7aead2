import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, describe, expect, it } from 'vitest';
import { EmailTakenError } from '../accounts/account-store.ts';
import { sha256Hex } from '../accounts/api-keys.ts';
import { TOUCH_INTERVAL_MS } from '../authorize.ts';
import { accountStoreContract } from './account-store.contract.ts';
import { AccountsFileError } from './accounts-file-error.ts';
import { jsonBackupPath } from './json-accounts-import.ts';
import {
  memoryAccountStore,
  openSqliteAccountStore,
  type SqliteAccountStore,
} from './sqlite-account-store.ts';

const dir = mkdtempSync(join(tmpdir(), 'nsfwd-accounts-'));
let n = 0;
const freshPath = () => join(dir, `sub${++n}`, 'accounts.json');
const opened: SqliteAccountStore[] = [];
function openFile(path = freshPath()) {
  const store = openSqliteAccountStore(path);
  opened.push(store);
  return store;
}

afterAll(async () => {
  for (const s of opened) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('memory account store', () => accountStoreContract(async () => memoryAccountStore()));
describe('SQLite account store', () => accountStoreContract(async () => openFile()));

/** Everything SQLite holds for the file: the database and its write-ahead log. */
function bytesOf(path: string): string {
  return readdirSync(join(path, '..'))
    .filter((name) => name.startsWith('accounts.json'))
    .map((name) => readFileSync(join(path, '..', name), 'latin1'))
    .join('');
}

describe('SQLite account store: the file', () => {
  it('creates the database (mode 600) at open and keeps accounts, keys and sessions across reopen', async () => {
    const path = freshPath();
    const first = openFile(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'latin1').startsWith('SQLite format 3\0')).toBe(true);
    const a = await first.createAccount({ email: 'keep@example.com', tier: 'pro' });
    const key = await first.createKey(a.id);
    const session = await first.createSession(a.id, 60_000);
    await first.close();
    const second = openFile(path);
    expect(await second.getAccount(a.id)).toEqual(a);
    expect((await second.resolveKey(key?.secret as string))?.account.id).toBe(a.id);
    expect((await second.resolveSession(session.token))?.accountId).toBe(a.id);
  });

  it('stores only the SHA-256 of a key and of a session token', async () => {
    const path = freshPath();
    const store = openFile(path);
    const a = await store.createAccount({ email: 'hash@example.com', tier: 'free' });
    const key = await store.createKey(a.id);
    const session = await store.createSession(a.id, 60_000);
    const bytes = bytesOf(path);
    expect(bytes).toContain(sha256Hex(key?.secret as string));
    expect(bytes).not.toContain(key?.secret as string);
    expect(bytes).toContain(sha256Hex(session.token));
    expect(bytes).not.toContain(session.token);
  });

  it('sees another connection’s change on the very next read (revocation, tier, deletion)', async () => {
    const path = freshPath();
    const server = openFile(path);
    const cli = openFile(path);
    const a = await cli.createAccount({ email: 'cli@example.com', tier: 'free' });
    const key = await cli.createKey(a.id);
    expect((await server.resolveKey(key?.secret as string))?.account.tier).toBe('free');
    await cli.setTier(a.id, 'pro');
    expect((await server.resolveKey(key?.secret as string))?.account.tier).toBe('pro');
    await cli.revokeKey(key?.record.id as string);
    expect(await server.resolveKey(key?.secret as string)).toBeUndefined();
    const other = await cli.createKey(a.id);
    expect((await server.resolveKey(other?.secret as string))?.key.id).toBe(other?.record.id);
    await cli.deleteAccount(a.id);
    expect(await server.resolveKey(other?.secret as string)).toBeUndefined();
  });

  it('sees the admin CLI’s change made by another process on the next read', async () => {
    const path = freshPath();
    const server = openFile(path);
    const a = await server.createAccount({ email: 'proc@example.com', tier: 'free' });
    const key = await server.createKey(a.id);
    // Another process (the CLI) writes with its own connection.
    const script = `
      import { openSqliteAccountStore } from './services/quota/stores/sqlite-account-store.ts';
      const s = openSqliteAccountStore(${JSON.stringify(path)});
      await s.setTier(${JSON.stringify(a.id)}, 'pro');
      await s.close();`;
    const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      encoding: 'utf8',
    });
    expect(child.status, child.stderr).toBe(0);
    expect((await server.resolveKey(key?.secret as string))?.account.tier).toBe('pro');
  });

  it('loses no update when two instances write at once, and keeps emails unique across them', async () => {
    const path = freshPath();
    const one = openFile(path);
    const two = openFile(path);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? one : two).createAccount({ email: `u${i}@example.com`, tier: 'free' }),
      ),
    );
    expect(await one.listAccounts()).toHaveLength(20);
    expect(await two.listAccounts()).toHaveLength(20);
    await expect(two.createAccount({ email: 'U3@example.com', tier: 'free' })).rejects.toBeInstanceOf(
      EmailTakenError,
    );
  });

  it('writes the database for a taken email as for a new one (a sign-up’s time tells neither)', async () => {
    const path = freshPath();
    const store = openFile(path);
    const watcher = new DatabaseSync(path);
    const version = () =>
      (watcher.prepare('PRAGMA data_version').get() as { data_version: number }).data_version;
    try {
      await store.createAccount({ email: 'first@example.com', tier: 'free', passwordHash: 'h1' });
      const afterNew = version();
      await expect(
        store.createAccount({ email: 'FIRST@example.com', tier: 'pro', passwordHash: 'h2' }),
      ).rejects.toBeInstanceOf(EmailTakenError);
      // Another connection saw a commit: the refused sign-up wrote (its row, unchanged).
      expect(version()).toBeGreaterThan(afterNew);
      expect(await store.findAccountByEmail('first@example.com')).toMatchObject({
        tier: 'free',
        passwordHash: 'h1',
      });
    } finally {
      watcher.close();
    }
  });

  it('refuses to start on a file that is not ours, without touching it', () => {
    const path = join(dir, 'bad.json');
    for (const text of ['{"not": "accounts"', '{"version": 2}', 'plain text']) {
      writeFileSync(path, text);
      expect(() => openSqliteAccountStore(path), text).toThrow(AccountsFileError);
      expect(readFileSync(path, 'utf8')).toBe(text);
    }
    expect(() => openSqliteAccountStore(path)).toThrow(/neither an accounts database nor/);
  });

  it('refuses a path it cannot create or read as a file', () => {
    const file = join(dir, 'plain-file');
    writeFileSync(file, 'x');
    expect(() => openSqliteAccountStore(join(file, 'accounts.json'))).toThrow(AccountsFileError);
    const directory = join(dir, 'a-directory');
    mkdirSync(directory);
    expect(() => openSqliteAccountStore(directory)).toThrow(AccountsFileError);
  });

  it('keeps the write-ahead log bounded through 2,000 sign-ups in a row, and the file growing with its data', async () => {
    const path = freshPath();
    const store = openFile(path);
    const walBytes = () => {
      try {
        return statSync(`${path}-wal`).size;
      } catch {
        return 0;
      }
    };
    let largest = 0;
    for (let i = 0; i < 2000; i++) {
      await store.createAccount({
        email: `wave-${i}@example.com`,
        tier: 'free',
        passwordHash: `scrypt$${i}`,
      });
      largest = Math.max(largest, walBytes());
    }
    const dbBytes = statSync(path).size;
    console.log(
      `2,000 sign-ups: largest WAL ${largest} bytes, WAL now ${walBytes()}, database ${dbBytes} bytes`,
    );
    expect(largest).toBeLessThan(8 * 1024 * 1024);
    // Checkpointed as it went: the rows are in the database file, not only in the log.
    const copy = new DatabaseSync(path, { readOnly: true });
    try {
      const { n } = copy.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number };
      expect(n).toBe(2000);
      const { free } = copy.prepare('SELECT freelist_count AS free FROM pragma_freelist_count').get() as {
        free: number;
      };
      expect(free).toBe(0);
    } finally {
      copy.close();
    }
    // Some 2,000 rows of ~150 bytes and their two indexes: well under 2 MiB, however written.
    expect(dbBytes).toBeGreaterThan(200 * 1024);
    expect(dbBytes).toBeLessThan(2 * 1024 * 1024);
  });

  it('writes the last use of a key at most once per interval, so traffic does not grow the log', async () => {
    const path = freshPath();
    const store = openFile(path);
    const a = await store.createAccount({ email: 'busy@example.com', tier: 'free' });
    const key = await store.createKey(a.id);
    if (!key) throw new Error('key not created');
    const t0 = new Date('2031-01-01T00:00:00.000Z');
    await store.touchKey(key.record.id, t0);
    const walAfterFirst = statSync(`${path}-wal`).size;
    for (let i = 1; i <= 1000; i++) await store.touchKey(key.record.id, new Date(t0.getTime() + i * 10));
    expect((await store.getKey(key.record.id))?.lastUsedAt).toBe(t0.toISOString());
    expect(statSync(`${path}-wal`).size).toBe(walAfterFirst);
    const later = new Date(t0.getTime() + TOUCH_INTERVAL_MS);
    await store.touchKey(key.record.id, later);
    expect((await store.getKey(key.record.id))?.lastUsedAt).toBe(later.toISOString());
  });

  it('creates accounts in bulk, each with a key that resolves', async () => {
    const store = openFile();
    const secrets: string[] = [];
    store.bulkCreateAccounts(
      500,
      (i) => `bulk${i}@example.com`,
      (_, secret) => secrets.push(secret),
    );
    expect(await store.listAccounts()).toHaveLength(500);
    expect((await store.resolveKey(secrets[123] as string))?.account.email).toBe('bulk123@example.com');
  });
});

describe('SQLite account store: importing the JSON file of the earlier store', () => {
  const old = {
    version: 1,
    accounts: {
      acc_00000000000000aa: {
        id: 'acc_00000000000000aa',
        // As a release before NFKC normalisation stored it: fullwidth letters kept.
        email: 'ａｄａ@example.com',
        tier: 'pro',
        passwordHash: 'scrypt$x',
        createdAt: '2026-01-01T00:00:00.000Z',
      },
      acc_00000000000000bb: {
        id: 'acc_00000000000000bb',
        email: 'bob@example.com',
        tier: 'free',
        passwordHash: '',
        createdAt: '2026-01-02T00:00:00.000Z',
      },
    },
    keys: {
      key_00000000000000k1: {
        id: 'key_00000000000000k1',
        accountId: 'acc_00000000000000aa',
        name: 'ci',
        prefix: 'nsk_live_1111',
        last4: '1111',
        createdAt: '2026-01-01T01:00:00.000Z',
        lastUsedAt: '2026-01-03T00:00:00.000Z',
        revokedAt: null,
        hash: '35dd7ea349fe2a7d2f75f373060c211c93886809f1a892d68dd85beb39db6e92', // nsk_live_1…1
      },
      key_00000000000000k2: {
        id: 'key_00000000000000k2',
        accountId: 'acc_00000000000000bb',
        name: '',
        prefix: 'nsk_live_2222',
        last4: '2222',
        createdAt: '2026-01-02T01:00:00.000Z',
        lastUsedAt: null,
        revokedAt: '2026-01-02T02:00:00.000Z',
        hash: '4fe7d1830f461d0a5d610a731d910693c4be93a6e409d7de19ca8cbabab939d9', // nsk_live_2…2
      },
    },
    sessions: {
      // printf %s aaaa…a (64) | sha256sum
      ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb: {
        accountId: 'acc_00000000000000aa',
        expiresAt: '2099-01-01T00:00:00.000Z',
      },
      // printf %s bbbb…b (64) | sha256sum
      a0fab1377f49a759b57f63318262ebe89fabfc990e8e93ceac2984561482b9d4: {
        accountId: 'acc_00000000000000aa',
        expiresAt: '2000-01-01T00:00:00.000Z',
      },
    },
  };
  const jsonText = `${JSON.stringify(old, null, 2)}\n`;

  function writeOld(): string {
    const path = freshPath();
    mkdirSync(join(path, '..'), { recursive: true });
    writeFileSync(path, jsonText);
    return path;
  }

  it('imports accounts, keys (revoked stay revoked) and live sessions once, keeping the JSON as a backup', async () => {
    const path = writeOld();
    const store = openFile(path);
    expect(readFileSync(path, 'latin1').startsWith('SQLite format 3\0')).toBe(true);
    expect(readFileSync(jsonBackupPath(path), 'utf8')).toBe(jsonText);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const accounts = await store.listAccounts();
    expect(accounts.map((a) => [a.id, a.email, a.tier])).toEqual([
      ['acc_00000000000000aa', 'ada@example.com', 'pro'],
      ['acc_00000000000000bb', 'bob@example.com', 'free'],
    ]);
    expect((await store.getAccount('acc_00000000000000aa'))?.passwordHash).toBe('scrypt$x');
    const resolved = await store.resolveKey(`nsk_live_${'1'.repeat(32)}`);
    expect(resolved?.key).toMatchObject({
      id: 'key_00000000000000k1',
      name: 'ci',
      lastUsedAt: '2026-01-03T00:00:00.000Z',
    });
    expect(await store.resolveKey(`nsk_live_${'2'.repeat(32)}`)).toBeUndefined();
    expect((await store.getKey('key_00000000000000k2'))?.revokedAt).toBe('2026-01-02T02:00:00.000Z');
    expect((await store.resolveSession('a'.repeat(64)))?.accountId).toBe('acc_00000000000000aa');
    expect(await store.resolveSession('b'.repeat(64))).toBeUndefined();
    // The email stored before NFKC normalisation is found under every spelling, and blocks look-alikes.
    for (const spelling of ['ａｄａ@example.com', 'ADA@example.com', 'ada@example.com'])
      expect((await store.findAccountByEmail(spelling))?.id, spelling).toBe('acc_00000000000000aa');
    await expect(store.createAccount({ email: 'Ada@Example.com', tier: 'free' })).rejects.toBeInstanceOf(
      EmailTakenError,
    );
    // Nothing else is left beside it; a second open does not import again (the backup is untouched).
    const names = readdirSync(join(path, '..')).filter((name) => !/-(wal|shm)$/.test(name));
    expect(names.sort()).toEqual(['accounts.json', 'accounts.json.json-backup']);
    await store.createAccount({ email: 'new@example.com', tier: 'free' });
    await store.close();
    const again = openFile(path);
    expect(await again.listAccounts()).toHaveLength(3);
    expect(readFileSync(jsonBackupPath(path), 'utf8')).toBe(jsonText);
  });

  it('imports once when two processes open the JSON file together', async () => {
    const path = writeOld();
    const script = `
      import { openSqliteAccountStore } from './services/quota/stores/sqlite-account-store.ts';
      const s = openSqliteAccountStore(${JSON.stringify(path)});
      await s.createAccount({ email: 'p' + process.pid + '@example.com', tier: 'free' });
      await s.close();`;
    const { spawn } = await import('node:child_process');
    const codes = await Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<number | null>((resolve) => {
            const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
              stdio: ['ignore', 'ignore', 'inherit'],
            });
            child.on('exit', resolve);
          }),
      ),
    );
    expect(codes).toEqual([0, 0, 0]);
    // Both imported accounts and each process's own: none was lost to a second import.
    expect(await openFile(path).listAccounts()).toHaveLength(5);
  });

  it('removes what a dead importer left (its lock, its half-built database) and imports', async () => {
    const path = writeOld();
    const dead = spawnSync(process.execPath, ['-e', '0']).pid as number;
    writeFileSync(`${path}.import-lock`, String(dead));
    writeFileSync(`${path}.importing-${dead}-0badf00d`, 'half-built');
    const store = openFile(path);
    expect(await store.listAccounts()).toHaveLength(2);
    const names = readdirSync(join(path, '..')).filter((name) => !/-(wal|shm)$/.test(name));
    expect(names.sort()).toEqual(['accounts.json', 'accounts.json.json-backup']);
  });

  it('refuses a malformed JSON file without touching it or leaving anything', () => {
    const path = freshPath();
    mkdirSync(join(path, '..'), { recursive: true });
    const text = JSON.stringify({ ...old, keys: { key_x: { id: 'key_y' } } });
    writeFileSync(path, text);
    expect(() => openSqliteAccountStore(path)).toThrow(/key key_x is malformed/);
    expect(readFileSync(path, 'utf8')).toBe(text);
    expect(readdirSync(join(path, '..'))).toEqual(['accounts.json']);
  });
});
