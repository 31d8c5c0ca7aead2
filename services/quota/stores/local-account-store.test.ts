import { spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EmailTakenError } from '../accounts/account-store.ts';
import { sha256Hex } from '../accounts/api-keys.ts';
import { accountStoreContract } from './account-store.contract.ts';
import {
  AccountsFileError,
  type LocalAccountStore,
  lockOwnerState,
  memoryAccountStore,
  openFileAccountStore,
  processStartTime,
} from './local-account-store.ts';

const dir = mkdtempSync(join(tmpdir(), 'nsfwd-accounts-'));
let n = 0;
const freshPath = () => join(dir, `sub${++n}`, 'accounts.json');
const opened: LocalAccountStore[] = [];
async function openFile(path = freshPath()) {
  const store = await openFileAccountStore(path);
  opened.push(store);
  return store;
}

afterAll(async () => {
  for (const s of opened) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('memory account store', () => accountStoreContract(async () => memoryAccountStore()));
describe('file account store', () => accountStoreContract(() => openFile()));

describe('file account store: the file', () => {
  it('creates the file (mode 600) at open and keeps accounts and keys across reopen', async () => {
    const path = freshPath();
    const first = await openFile(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const a = await first.createAccount({ email: 'keep@example.com', tier: 'pro' });
    const key = await first.createKey(a.id);
    await first.close();
    const second = await openFile(path);
    expect(await second.getAccount(a.id)).toEqual(a);
    expect((await second.resolveKey(key?.secret as string))?.account.id).toBe(a.id);
  });

  it('stores only the SHA-256 of a key, and leaves no temp or lock file behind', async () => {
    const path = freshPath();
    const store = await openFile(path);
    const a = await store.createAccount({ email: 'hash@example.com', tier: 'free' });
    const key = await store.createKey(a.id);
    const text = readFileSync(path, 'utf8');
    expect(text).not.toContain(key?.secret as string);
    expect(text).toContain(sha256Hex(key?.secret as string));
    expect(readdirSync(join(path, '..'))).toEqual(['accounts.json']);
  });

  it('sees another process’s change on the next read (revocation, tier)', async () => {
    const path = freshPath();
    const server = await openFile(path);
    const cli = await openFile(path);
    const a = await cli.createAccount({ email: 'cli@example.com', tier: 'free' });
    const key = await cli.createKey(a.id);
    expect((await server.resolveKey(key?.secret as string))?.account.tier).toBe('free');
    await cli.setTier(a.id, 'pro');
    expect((await server.resolveKey(key?.secret as string))?.account.tier).toBe('pro');
    await cli.revokeKey(key?.record.id as string);
    expect(await server.resolveKey(key?.secret as string)).toBeUndefined();
  });

  it('loses no update when two instances write at once', async () => {
    const path = freshPath();
    const one = await openFile(path);
    const two = await openFile(path);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? one : two).createAccount({ email: `u${i}@example.com`, tier: 'free' }),
      ),
    );
    expect(await one.listAccounts()).toHaveLength(20);
    expect(await two.listAccounts()).toHaveLength(20);
  });

  it('refuses to start on a file that is not ours, without touching it', async () => {
    const path = join(dir, 'bad.json');
    writeFileSync(path, '{"not": "accounts"');
    await expect(openFileAccountStore(path)).rejects.toBeInstanceOf(AccountsFileError);
    writeFileSync(path, '{"version": 2}');
    await expect(openFileAccountStore(path)).rejects.toThrow(/version/);
    expect(readFileSync(path, 'utf8')).toBe('{"version": 2}');
  });

  it('finds accounts stored before NFKC normalisation, and refuses their look-alikes', async () => {
    const path = freshPath();
    mkdirSync(join(path, '..'), { recursive: true });
    // As the previous release stored it: trim + lowercase only, so the fullwidth letters stayed.
    const old = {
      id: 'acc_00000000000000aa',
      email: 'ａｄａ@example.com',
      tier: 'free',
      passwordHash: '',
      createdAt: '2026-01-01T00:00:00.000Z',
    };
    writeFileSync(path, JSON.stringify({ version: 1, accounts: { [old.id]: old }, keys: {}, sessions: {} }));
    const store = await openFile(path);
    for (const spelling of ['ａｄａ@example.com', 'ADA@example.com', 'ada@example.com'])
      expect((await store.findAccountByEmail(spelling))?.id, spelling).toBe(old.id);
    await expect(store.createAccount({ email: 'Ada@Example.com', tier: 'free' })).rejects.toBeInstanceOf(
      EmailTakenError,
    );
  });

  it('refuses a path it cannot create', async () => {
    const file = join(dir, 'plain-file');
    writeFileSync(file, 'x');
    await expect(openFileAccountStore(join(file, 'accounts.json'))).rejects.toBeInstanceOf(AccountsFileError);
  });
});

describe('file account store: locks and leftovers of dead processes', () => {
  /** The pid of a process that has exited. */
  const deadPid = () => spawnSync(process.execPath, ['-e', '0']).pid as number;
  const me = { pid: process.pid, host: hostname(), start: processStartTime(process.pid) as string };
  /** A directory holding an accounts file, and what a writer could have left beside it. */
  async function fileWith(leftovers: Record<string, string>, ageSeconds = 0): Promise<string> {
    const path = freshPath();
    await (await openFile(path)).createAccount({ email: 'left@example.com', tier: 'free' });
    for (const [name, text] of Object.entries(leftovers)) {
      const file = join(path, '..', name);
      writeFileSync(file, text);
      if (ageSeconds) {
        const at = Date.now() / 1000 - ageSeconds;
        utimesSync(file, at, at);
      }
    }
    return path;
  }
  const names = (path: string) => readdirSync(join(path, '..')).sort();

  it('knows a live owner, a dead one and a recycled pid', () => {
    expect(processStartTime(process.pid)).toMatch(/^\d+$/);
    expect(lockOwnerState(me)).toBe('alive');
    expect(lockOwnerState({ ...me, pid: deadPid() })).toBe('dead');
    // Our pid, but started at another time: the owner died and its pid went to this process.
    expect(lockOwnerState({ ...me, start: '1' })).toBe('dead');
    expect(lockOwnerState({ ...me, host: 'another-host' })).toBe('unknown');
  });

  it('breaks a dead owner’s lock at start and removes its temp files', async () => {
    const dead = deadPid();
    const path = await fileWith({
      'accounts.json.lock': JSON.stringify({ pid: dead, host: hostname(), start: '123' }),
      [`accounts.json.${dead}.0badf00d.tmp`]: '{"version": 1, "half": "written',
      [`accounts.json.lock.${dead}.0badf00d.tmp`]: '{}',
    });
    const store = await openFile(path);
    expect(names(path)).toEqual(['accounts.json']);
    expect(await store.listAccounts()).toHaveLength(1);
  });

  it('breaks a lock whose pid was recycled by a live process, and a bare-pid lock of an earlier release', async () => {
    for (const lock of [JSON.stringify({ ...me, start: '1' }), String(deadPid())]) {
      const path = await fileWith({ 'accounts.json.lock': lock });
      await openFile(path);
      expect(names(path)).toEqual(['accounts.json']);
    }
  });

  it('a running writer that meets a dead owner’s lock breaks it', async () => {
    const path = freshPath();
    const store = await openFile(path);
    writeFileSync(`${path}.lock`, JSON.stringify({ pid: deadPid(), host: hostname() }));
    writeFileSync(`${path}.${process.pid}.00000000.tmp`, 'left by a writer that died');
    await store.createAccount({ email: 'after@example.com', tier: 'free' });
    expect(names(path)).toEqual(['accounts.json']);
  });

  it('waits for a live owner’s lock and says who holds it', async () => {
    const path = await fileWith({ 'accounts.json.lock': JSON.stringify(me) });
    const err = await openFileAccountStore(path, { lockWaitMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AccountsFileError);
    expect(String(err)).toMatch(/stayed locked by a live process .*"pid":\d+/);
    expect(names(path)).toContain('accounts.json.lock');
  });

  it('waits past its usual patience for a lock it cannot check to become abandoned, then comes up', async () => {
    // Another host's lock (say, the same volume before a container restart under a new hostname),
    // almost old enough: the store waits the rest of LOCK_STALE_MS although it would give up on a live
    // owner after 200 ms.
    const path = await fileWith(
      { 'accounts.json.lock': JSON.stringify({ pid: 1, host: 'another-host' }) },
      9,
    );
    const store = await openFileAccountStore(path, { lockWaitMs: 200 });
    opened.push(store);
    expect(names(path)).toEqual(['accounts.json']);
  });

  it('takes an unverifiable lock (another host, unreadable) as abandoned once it is old', async () => {
    for (const lock of [JSON.stringify({ pid: 1, host: 'another-host' }), '']) {
      const path = await fileWith({ 'accounts.json.lock': lock }, 60);
      await openFile(path);
      expect(names(path)).toEqual(['accounts.json']);
    }
  });

  it('leaves a live process’s lock attempt alone', async () => {
    const path = freshPath();
    mkdirSync(join(path, '..'), { recursive: true });
    // Our parent process is alive (and not us, whose own files are never swept).
    const attempt = `accounts.json.lock.${process.ppid}.12345678.tmp`;
    writeFileSync(join(path, '..', attempt), '{}');
    await openFile(path);
    expect(names(path)).toEqual(['accounts.json', attempt]);
  });
});
