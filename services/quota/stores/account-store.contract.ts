// The behaviour every AccountStore + SessionStore implementation must show; run against the memory,
// file and Redis implementations.

import { expect, it } from 'vitest';
import {
  type AccountStore,
  EmailTakenError,
  InvalidEmailError,
  KeyLimitError,
  type SessionStore,
} from '../accounts/account-store.ts';
import { isValidApiKeyFormat, sha256Hex } from '../accounts/api-keys.ts';

type Store = AccountStore & SessionStore;

export function accountStoreContract(open: () => Promise<Store>): void {
  it('creates accounts with normalised, unique emails', async () => {
    const store = await open();
    const a = await store.createAccount({ email: '  Alice@Example.COM ', tier: 'free', passwordHash: 'h1' });
    expect(a).toMatchObject({ email: 'alice@example.com', tier: 'free', passwordHash: 'h1' });
    expect(a.id).toMatch(/^acc_[0-9a-f]{16}$/);
    expect(Number.isNaN(Date.parse(a.createdAt))).toBe(false);
    await expect(store.createAccount({ email: 'alice@example.com', tier: 'pro' })).rejects.toBeInstanceOf(
      EmailTakenError,
    );
    expect(await store.getAccount(a.id)).toEqual(a);
    expect(await store.findAccountByEmail('ALICE@example.com')).toEqual(a);
    expect(await store.findAccountByEmail('bob@example.com')).toBeUndefined();
    expect(await store.getAccount('acc_0000000000000000')).toBeUndefined();
    const b = await store.createAccount({ email: 'bob@example.com', tier: 'pro' });
    expect(b.passwordHash).toBe('');
    expect((await store.listAccounts()).map((x) => x.id)).toEqual([a.id, b.id]);
  });

  it('maps look-alike emails (case, fullwidth, NFKC-equivalent) to one account', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'Strasse.ﬁ@Example.com', tier: 'free' });
    expect(a.email).toBe('strasse.fi@example.com');
    for (const lookAlike of [
      'STRASSE.FI@EXAMPLE.COM', // case
      'ｓｔｒａｓｓｅ.ｆｉ＠ｅｘａｍｐｌｅ.ｃｏｍ', // fullwidth letters and at sign
      'straße.fi@example.com', // ß case-folds to ss
      'strasse.\uFB01@example.com', // the fi ligature is NFKC-equivalent to fi
      ' strasse.fi@example.com\u00A0', // no-break space trimmed after NFKC
    ]) {
      expect((await store.findAccountByEmail(lookAlike))?.id, lookAlike).toBe(a.id);
      await expect(store.createAccount({ email: lookAlike, tier: 'free' }), lookAlike).rejects.toBeInstanceOf(
        EmailTakenError,
      );
    }
    expect(await store.listAccounts()).toHaveLength(1);
  });

  it('refuses control, zero-width and other invisible characters in emails', async () => {
    const store = await open();
    for (const bad of [
      'ada\u200B@example.com', // zero-width space
      'ad\u200Da@example.com', // zero-width joiner
      'ada@exa\u00ADmple.com', // soft hyphen
      'ada@example.com\u202E', // right-to-left override
      'a\u0000da@example.com', // NUL
      'ada\n@example.com', // newline
      'ada@ex\u3164ample.com', // Hangul filler
      'ada@example.com\uFE0F', // variation selector
      'a da@example.com', // a space inside
    ]) {
      await expect(
        store.createAccount({ email: bad, tier: 'free' }),
        JSON.stringify(bad),
      ).rejects.toBeInstanceOf(InvalidEmailError);
      expect(await store.findAccountByEmail(bad)).toBeUndefined();
    }
    expect(await store.listAccounts()).toHaveLength(0);
  });

  it('changes tier and password hash, and says when the account does not exist', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'tier@example.com', tier: 'free' });
    expect((await store.setTier(a.id, 'pro'))?.tier).toBe('pro');
    expect((await store.getAccount(a.id))?.tier).toBe('pro');
    expect((await store.setPasswordHash(a.id, 'scrypt$x'))?.passwordHash).toBe('scrypt$x');
    expect(await store.setTier('acc_ffffffffffffffff', 'pro')).toBeUndefined();
    expect(await store.setPasswordHash('acc_ffffffffffffffff', 'x')).toBeUndefined();
  });

  it('creates keys whose secret is shown once and resolves them by secret', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'keys@example.com', tier: 'free' });
    const created = await store.createKey(a.id, { name: 'ci' });
    if (!created) throw new Error('key not created');
    const { record, secret } = created;
    expect(isValidApiKeyFormat(secret)).toBe(true);
    expect(record).toMatchObject({
      accountId: a.id,
      name: 'ci',
      prefix: secret.slice(0, 13),
      last4: secret.slice(-4),
      lastUsedAt: null,
      revokedAt: null,
    });
    expect(record.id).toMatch(/^key_[0-9a-f]{16}$/);
    expect(JSON.stringify(record)).not.toContain(secret);
    expect(JSON.stringify(record)).not.toContain(sha256Hex(secret));
    const resolved = await store.resolveKey(secret);
    expect(resolved?.key).toEqual(record);
    expect(resolved?.account).toEqual(a);
    expect(await store.resolveKey(`nsk_live_${'0'.repeat(32)}`)).toBeUndefined();
    expect(await store.resolveKey('not a key')).toBeUndefined();
    expect(await store.createKey('acc_ffffffffffffffff')).toBeUndefined();
  });

  it('keeps maxActive under concurrent creations: exactly the limit are made, and a revocation frees one', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'limit@example.com', tier: 'free' });
    const old = await store.createKey(a.id);
    await store.revokeKey(old?.record.id as string);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 100 }, (_, i) => store.createKey(a.id, { name: `k${i}`, maxActive: 20 })),
    );
    expect(outcomes.filter((o) => o.status === 'fulfilled' && o.value)).toHaveLength(20);
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(refused).toHaveLength(80);
    for (const o of refused) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(KeyLimitError);
    const keys = await store.listKeys(a.id);
    expect(keys.filter((k) => k.revokedAt === null)).toHaveLength(20);
    expect(keys).toHaveLength(21);
    await expect(store.createKey(a.id, { maxActive: 20 })).rejects.toThrow(
      'At most 20 active keys per account; revoke one first',
    );
    await store.revokeKey(keys[0]?.id as string);
    expect(await store.createKey(a.id, { maxActive: 20 })).toBeDefined();
    // Without maxActive no limit applies (the admin CLI), and an unknown account is still undefined.
    expect(await store.createKey(a.id)).toBeDefined();
    expect(await store.createKey('acc_ffffffffffffffff', { maxActive: 20 })).toBeUndefined();
  });

  it('lists keys newest first, revoked ones included, and never the secret', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'list@example.com', tier: 'free' });
    const k1 = await store.createKey(a.id);
    await new Promise((r) => setTimeout(r, 5));
    const k2 = await store.createKey(a.id, { name: 'second' });
    const other = await store.createAccount({ email: 'other@example.com', tier: 'free' });
    await store.createKey(other.id);
    await store.revokeKey(k1?.record.id as string);
    const listed = await store.listKeys(a.id);
    expect(listed.map((k) => k.id)).toEqual([k2?.record.id, k1?.record.id]);
    expect(listed[1]?.revokedAt).not.toBeNull();
    expect(JSON.stringify(listed)).not.toContain(k1?.secret as string);
    expect(await store.getKey(k2?.record.id as string)).toEqual(k2?.record);
    expect(await store.getKey('key_ffffffffffffffff')).toBeUndefined();
  });

  it('revokes: the key never resolves again; ownership is checked when asked', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'rev@example.com', tier: 'free' });
    const b = await store.createAccount({ email: 'rev2@example.com', tier: 'free' });
    const key = await store.createKey(a.id);
    if (!key) throw new Error('key not created');
    expect(await store.revokeKey(key.record.id, b.id)).toBeUndefined();
    expect(await store.resolveKey(key.secret)).toBeDefined();
    const revoked = await store.revokeKey(key.record.id, a.id);
    expect(revoked?.revokedAt).not.toBeNull();
    expect(await store.resolveKey(key.secret)).toBeUndefined();
    // Idempotent, keeping the first revocation time.
    expect((await store.revokeKey(key.record.id))?.revokedAt).toBe(revoked?.revokedAt);
    expect(await store.revokeKey('key_ffffffffffffffff')).toBeUndefined();
  });

  it('records the last use, and a tier change shows in the next resolve', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'touch@example.com', tier: 'free' });
    const key = await store.createKey(a.id);
    if (!key) throw new Error('key not created');
    const at = new Date('2030-01-02T03:04:05.000Z');
    await store.touchKey(key.record.id, at);
    expect((await store.getKey(key.record.id))?.lastUsedAt).toBe(at.toISOString());
    await store.touchKey('key_ffffffffffffffff');
    await store.setTier(a.id, 'pro');
    expect((await store.resolveKey(key.secret))?.account.tier).toBe('pro');
  });

  it('deletes an account with its keys and email, idempotently; other accounts are untouched', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'Gone@Example.com', tier: 'pro' });
    const b = await store.createAccount({ email: 'stays@example.com', tier: 'free' });
    const k1 = await store.createKey(a.id, { name: 'ci' });
    const k2 = await store.createKey(a.id, { name: 'old' });
    const kb = await store.createKey(b.id);
    if (!k1 || !k2 || !kb) throw new Error('keys not created');
    await store.revokeKey(k2.record.id);
    expect(await store.deleteAccount(a.id)).toBe(true);
    expect(await store.getAccount(a.id)).toBeUndefined();
    expect(await store.findAccountByEmail('gone@example.com')).toBeUndefined();
    expect(await store.resolveKey(k1.secret)).toBeUndefined();
    expect(await store.getKey(k1.record.id)).toBeUndefined();
    expect(await store.getKey(k2.record.id)).toBeUndefined();
    expect(await store.listKeys(a.id)).toEqual([]);
    expect((await store.listAccounts()).map((x) => x.id)).toEqual([b.id]);
    expect(await store.createKey(a.id)).toBeUndefined();
    // Deleting again is fine (nothing left); the other account and its key still work.
    expect(await store.deleteAccount(a.id)).toBe(false);
    expect(await store.deleteAccount('acc_0000000000000000')).toBe(false);
    expect((await store.resolveKey(kb.secret))?.account.id).toBe(b.id);
    // The email is free again: a new account, with nothing of the old one.
    const again = await store.createAccount({ email: 'gone@example.com', tier: 'free' });
    expect(again.id).not.toBe(a.id);
    expect(await store.listKeys(again.id)).toEqual([]);
  });

  it('prunes console sign-ups older than the cut-off that never had a key, and nothing else', async () => {
    const store = await open();
    const unused = await store.createAccount({
      email: 'unused@example.com',
      tier: 'free',
      passwordHash: 'h',
    });
    const withKey = await store.createAccount({
      email: 'keyed@example.com',
      tier: 'free',
      passwordHash: 'h',
    });
    const revoked = await store.createAccount({
      email: 'revoked@example.com',
      tier: 'free',
      passwordHash: 'h',
    });
    const byAdmin = await store.createAccount({ email: 'admin-made@example.com', tier: 'pro' });
    const key = await store.createKey(withKey.id);
    const old = await store.createKey(revoked.id);
    await store.revokeKey(old?.record.id as string);
    // A cut-off before they were made: none is old enough.
    expect(await store.pruneUnusedAccounts(new Date(Date.parse(unused.createdAt) - 1000))).toBe(0);
    await new Promise((r) => setTimeout(r, 5));
    const fresh = await store.createAccount({ email: 'fresh@example.com', tier: 'free', passwordHash: 'h' });
    expect(await store.pruneUnusedAccounts(new Date(Date.parse(fresh.createdAt) - 1))).toBe(1);
    expect(await store.getAccount(unused.id)).toBeUndefined();
    expect(await store.findAccountByEmail('unused@example.com')).toBeUndefined();
    expect((await store.listAccounts()).map((a) => a.id).sort()).toEqual(
      [withKey.id, revoked.id, byAdmin.id, fresh.id].sort(),
    );
    expect((await store.resolveKey(key?.secret as string))?.account.id).toBe(withKey.id);
    // The email is free again.
    expect((await store.createAccount({ email: 'unused@example.com', tier: 'free' })).id).not.toBe(unused.id);
  });

  it('keeps sessions by token until they expire or are deleted', async () => {
    const store = await open();
    const a = await store.createAccount({ email: 'sess@example.com', tier: 'free' });
    const { token, expiresAt } = await store.createSession(a.id, 60_000);
    expect(token).toMatch(/^[0-9a-f]{64}$/);
    expect(Date.parse(expiresAt)).toBeGreaterThan(Date.now());
    expect(await store.resolveSession(token)).toEqual({ accountId: a.id, expiresAt });
    // A token one digit away (always a different digit) resolves to nothing.
    const wrong = `${token.slice(0, -1)}${token.endsWith('0') ? '1' : '0'}`;
    expect(await store.resolveSession(wrong)).toBeUndefined();
    await store.deleteSession(token);
    expect(await store.resolveSession(token)).toBeUndefined();
    await store.deleteSession(token);
    const short = await store.createSession(a.id, 30);
    await new Promise((r) => setTimeout(r, 60));
    expect(await store.resolveSession(short.token)).toBeUndefined();
  });
}
