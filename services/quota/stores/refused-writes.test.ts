// Every write path of the AccountStore + SessionStore contract where the medium refuses writes: a real
// full tmpfs and a read-only one (SQLite), Redis at `maxmemory` with `noeviction`, and Redis refusing
// writes (MISCONF) after a save failed on a read-only directory. Each write either stored its change
// (read back afterwards: SQLite from a fresh connection once space is back) or rejected with
// StoreWriteError and left nothing of itself. The same paths on a healthy medium all store, so each
// path's check does tell a stored change from a lost one.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childEnv } from '../../../test/support/children.ts';
import { RedisServer } from '../../../test/support/redis-server.ts';
import { ROOT } from '../../../test/support/server-process.ts';
import { mountTmpfs, type Tmpfs, tmpfsUnavailable } from '../../../test/support/tmpfs.ts';
import { describeWithTool, REDIS_SERVER } from '../../../test/support/tools.ts';
import {
  type Account,
  type AccountStore,
  type CreatedKey,
  type SessionStore,
  StoreWriteError,
} from '../accounts/account-store.ts';
import { AccountsFileError } from './accounts-file-error.ts';
import { RedisAccountStore } from './redis-account-store.ts';
import { connectRedis, type RedisClient, redisReady } from './redis-connection.ts';
import { openSqliteAccountStore } from './sqlite-account-store.ts';

type Store = AccountStore & SessionStore;

interface Fixture {
  a: Account;
  b: Account;
  unused: Account;
  k1: CreatedKey;
  k2: CreatedKey;
  session: string;
}

const AT = new Date('2031-01-02T03:04:05.000Z');

async function prepare(store: Store): Promise<Fixture> {
  const a = await store.createAccount({ email: 'a@example.com', tier: 'free', passwordHash: 'h' });
  const b = await store.createAccount({ email: 'b@example.com', tier: 'free' });
  const unused = await store.createAccount({ email: 'unused@example.com', tier: 'free', passwordHash: 'h' });
  const k1 = await store.createKey(a.id, { name: 'one' });
  const k2 = await store.createKey(a.id, { name: 'two' });
  if (!k1 || !k2) throw new Error('keys not created');
  const { token } = await store.createSession(a.id, 600_000);
  return { a, b, unused, k1, k2, session: token };
}

interface WritePath {
  name: string;
  run(store: Store, f: Fixture): Promise<unknown>;
  /** Whether the change is in the store (`result`: what `run` resolved with, undefined if it rejected). */
  stored(store: Store, f: Fixture, result: unknown): Promise<boolean>;
}

const WRITE_PATHS: WritePath[] = [
  {
    name: 'createAccount',
    // No password: an admin-made account, which pruneUnusedAccounts (run later) keeps.
    run: (s) => s.createAccount({ email: 'new@example.com', tier: 'free' }),
    stored: async (s) => (await s.findAccountByEmail('new@example.com')) !== undefined,
  },
  {
    name: 'setTier',
    run: (s, f) => s.setTier(f.a.id, 'pro'),
    stored: async (s, f) => (await s.getAccount(f.a.id))?.tier === 'pro',
  },
  {
    name: 'setPasswordHash',
    run: (s, f) => s.setPasswordHash(f.a.id, 'h2'),
    stored: async (s, f) => (await s.getAccount(f.a.id))?.passwordHash === 'h2',
  },
  {
    name: 'createKey',
    run: (s, f) => s.createKey(f.a.id, { name: 'three', maxActive: 20 }),
    stored: async (s, f, result) => {
      const listed = (await s.listKeys(f.a.id)).some((k) => k.name === 'three');
      const secret = (result as CreatedKey | undefined)?.secret;
      return listed && secret !== undefined && (await s.resolveKey(secret)) !== undefined;
    },
  },
  {
    name: 'revokeKey',
    run: (s, f) => s.revokeKey(f.k1.record.id),
    stored: async (s, f) => (await s.resolveKey(f.k1.secret)) === undefined,
  },
  {
    name: 'touchKey',
    run: (s, f) => s.touchKey(f.k2.record.id, AT),
    stored: async (s, f) => (await s.getKey(f.k2.record.id))?.lastUsedAt === AT.toISOString(),
  },
  {
    name: 'deleteAccount',
    run: (s, f) => s.deleteAccount(f.b.id),
    stored: async (s, f) => (await s.getAccount(f.b.id)) === undefined,
  },
  {
    name: 'pruneUnusedAccounts',
    run: (s) => s.pruneUnusedAccounts(new Date(Date.now() + 60_000)),
    stored: async (s, f) => (await s.getAccount(f.unused.id)) === undefined,
  },
  {
    name: 'createSession',
    run: (s, f) => s.createSession(f.a.id, 600_000),
    stored: async (s, _f, result) => {
      const token = (result as { token: string } | undefined)?.token;
      return token !== undefined && (await s.resolveSession(token)) !== undefined;
    },
  },
  {
    name: 'deleteSession',
    run: (s, f) => s.deleteSession(f.session),
    stored: async (s, f) => (await s.resolveSession(f.session)) === undefined,
  },
];

interface Outcome {
  name: string;
  result?: unknown;
  error?: unknown;
}

async function runAll(store: Store, f: Fixture): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (const path of WRITE_PATHS) {
    try {
      outcomes.push({ name: path.name, result: await path.run(store, f) });
    } catch (error) {
      outcomes.push({ name: path.name, error });
    }
  }
  return outcomes;
}

/** Each write stored its change, or rejected with StoreWriteError and stored nothing; returns the refused. */
async function expectStoredOrRefused(reader: Store, f: Fixture, outcomes: Outcome[]): Promise<string[]> {
  const refused: string[] = [];
  for (const [i, outcome] of outcomes.entries()) {
    const path = WRITE_PATHS[i] as WritePath;
    const stored = await path.stored(reader, f, outcome.result);
    if (outcome.error === undefined) {
      expect(stored, `${path.name} resolved, so its change must be stored`).toBe(true);
    } else {
      expect(outcome.error, path.name).toBeInstanceOf(StoreWriteError);
      expect(stored, `${path.name} was refused, so nothing of it may be stored`).toBe(false);
      refused.push(path.name);
    }
  }
  console.log(`refused: ${refused.join(', ') || 'none'}; stored: ${outcomes.length - refused.length}`);
  return refused;
}

function admin(env: Record<string, string>, ...args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'services/admin/cli.ts', ...args],
      { cwd: ROOT, env: childEnv({ ...process.env, TSX_DISABLE_CACHE: '1', ...env }) },
      (err, _stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr }),
    );
  });
}

const unavailable = tmpfsUnavailable();
const describeMounted = unavailable === undefined ? describe : describe.skip;
if (unavailable !== undefined) {
  if (process.env.CI === 'true')
    throw new Error(`a tmpfs cannot be mounted here (${unavailable}); CI runs as root`);
  console.log(`refused-writes: skipped, ${unavailable}`);
}

describeMounted('writes on a full disk and a read-only directory', () => {
  // Two mounts: the kernel refuses to make one read-only while a file on it is open for writing.
  let disk: Tmpfs;
  let readOnlyDisk: Tmpfs;
  const opened: Store[] = [];
  beforeAll(() => {
    disk = mountTmpfs(4 * 1024 * 1024);
    readOnlyDisk = mountTmpfs(1024 * 1024);
  });
  afterAll(async () => {
    try {
      for (const s of opened) await s.close();
    } finally {
      try {
        disk.unmount();
      } finally {
        readOnlyDisk.unmount();
      }
    }
  });
  let n = 0;
  const open = (path = join(disk.dir, `s${++n}`, 'accounts.db')) => {
    const store = openSqliteAccountStore(path);
    opened.push(store);
    return { store, path };
  };

  it('SQLite, healthy: every write path stores its change (the checks see a stored change)', async () => {
    const { store } = open();
    const f = await prepare(store);
    expect(await expectStoredOrRefused(store, f, await runAll(store, f))).toEqual([]);
  });

  it('SQLite, disk full: each write is stored or refused with StoreWriteError, as a fresh connection sees it', async () => {
    const { store, path } = open();
    const f = await prepare(store);
    disk.fill();
    let outcomes: Outcome[];
    try {
      outcomes = await runAll(store, f);
      // The admin CLI, on the same full disk: exit 1 and why, not "tier free → pro".
      const cli = await admin({ ACCOUNTS_FILE: path }, 'set-tier', 'unused@example.com', 'pro');
      expect(cli.code, cli.stderr).toBe(1);
      expect(cli.stderr).toMatch(
        /^not saved: the accounts database did not save the change: database or disk is full/,
      );
    } finally {
      disk.free();
    }
    await store.close();
    const { store: fresh } = open(path);
    const refused = await expectStoredOrRefused(fresh, f, outcomes);
    // The disk was really full: the writes that need new space were refused.
    expect(refused).toEqual(
      expect.arrayContaining(['createAccount', 'setTier', 'createKey', 'createSession']),
    );
    expect((await fresh.getAccount(f.unused.id))?.tier).toBe('free');
  });

  it('SQLite, read-only directory: the store refuses to open (nothing is ever acknowledged), and the CLI says so', async () => {
    const { store, path } = open(join(readOnlyDisk.dir, 'accounts.db'));
    await prepare(store);
    await store.close();
    // A directory cannot turn read-only under a store that has files open for writing on it (the
    // kernel refuses remount,ro with EBUSY), so a read-only directory is met at open.
    readOnlyDisk.readOnly();
    try {
      expect(() => openSqliteAccountStore(path)).toThrow(AccountsFileError);
      const cli = await admin({ ACCOUNTS_FILE: path }, 'set-tier', 'a@example.com', 'pro');
      expect(cli.code, cli.stderr).toBe(1);
      expect(cli.stderr).toMatch(
        /^cannot open the account store: cannot open ACCOUNTS_FILE .*unable to open database file/,
      );
    } finally {
      readOnlyDisk.readWrite();
    }
    const again = openSqliteAccountStore(path);
    try {
      expect((await again.findAccountByEmail('a@example.com'))?.tier).toBe('free');
    } finally {
      await again.close();
    }
  });

  describeWithTool(REDIS_SERVER, 'Redis', () => {
    const servers: RedisServer[] = [];
    const clients: RedisClient[] = [];
    afterAll(async () => {
      for (const c of clients) c.disconnect();
      await Promise.all(servers.map((s) => s.stop()));
    });

    async function redisStore(args: string[]): Promise<{ store: RedisAccountStore; admin: RedisClient }> {
      const server = await RedisServer.start({ args });
      servers.push(server);
      const connect = () =>
        connectRedis({
          target: server.url,
          commandTimeoutMs: 5000,
          socketTimeoutMs: 10_000,
          connectTimeoutMs: 2000,
        });
      const redis = connect();
      const admin = connect();
      clients.push(admin);
      await redisReady(redis, 5000);
      await redisReady(admin, 5000);
      const store = new RedisAccountStore(redis, 'rw:');
      opened.push(store);
      return { store, admin };
    }

    it('maxmemory reached (noeviction): each write is stored or refused with StoreWriteError', async () => {
      const { store, admin } = await redisStore(['--maxmemory-policy', 'noeviction']);
      const f = await prepare(store);
      // 4 MiB of other data, then a limit well below it: past maxmemory at every command, not at the
      // edge where freed buffers let one write through and refuse the next.
      const block = 'x'.repeat(64 * 1024);
      for (let i = 0; i < 64; i++) await admin.set(`filler:${i}`, block);
      await admin.config('SET', 'maxmemory', String(2 * 1024 * 1024));
      await expect(admin.set('probe', '1')).rejects.toThrow(/^OOM /);
      const outcomes = await runAll(store, f);
      const refused = await expectStoredOrRefused(store, f, outcomes);
      // Whatever adds data is refused; deletions (DEL is allowed out of memory) go through.
      expect(refused).toEqual([
        'createAccount',
        'setTier',
        'setPasswordHash',
        'createKey',
        'revokeKey',
        'touchKey',
        'createSession',
      ]);
    });

    it('MISCONF after a save failed on a read-only directory: each write is stored or refused', async () => {
      const { store, admin } = await redisStore([
        '--stop-writes-on-bgsave-error',
        'yes',
        // CONFIG SET dir, as an operator moving the data directory would.
        '--enable-protected-configs',
        'yes',
      ]);
      const f = await prepare(store);
      readOnlyDisk.readOnly();
      try {
        // A save point makes a failed save stop writes (Redis checks it only with save points set).
        await admin.config('SET', 'save', '3600 1');
        await admin.config('SET', 'dir', readOnlyDisk.dir);
        await admin.bgsave();
        for (let i = 0; i < 200; i++) {
          const info = await admin.info('persistence');
          if (/rdb_last_bgsave_status:err/.test(info) && /rdb_bgsave_in_progress:0/.test(info)) break;
          await new Promise((r) => setTimeout(r, 25));
        }
        await expect(admin.set('probe', '1')).rejects.toThrow(/^MISCONF /);
        const outcomes = await runAll(store, f);
        const refused = await expectStoredOrRefused(store, f, outcomes);
        // Every write command is refused, deletions too.
        expect(refused).toEqual(WRITE_PATHS.map((p) => p.name));
      } finally {
        readOnlyDisk.readWrite();
      }
    });
  });
});
