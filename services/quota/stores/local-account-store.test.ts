import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hashApiKey } from '../api-keys.ts';
import { accountStoreContract } from './account-store.contract.ts';
import {
  AccountsFileError,
  type LocalAccountStore,
  memoryAccountStore,
  openFileAccountStore,
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
    expect(text).toContain(hashApiKey(key?.secret as string));
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

  it('refuses a path it cannot create', async () => {
    const file = join(dir, 'plain-file');
    writeFileSync(file, 'x');
    await expect(openFileAccountStore(join(file, 'accounts.json'))).rejects.toBeInstanceOf(AccountsFileError);
  });
});
