// Crash safety of the embedded accounts database with real processes: a child writes through the store
// (opened exactly as the server opens it), printing every write the store acknowledged, and is killed
// with SIGKILL mid-write, 20 times. After each kill every acknowledged write must be there (accounts,
// keys that resolve, sessions, tier changes, revocations), the database must pass SQLite's integrity
// check, nothing but the database and its WAL files may lie beside it, and a long-running second
// process (the server while the admin CLI is killed, or the reverse) must keep writing without waiting.

import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqliteAccountStore } from '../services/quota/stores/sqlite-account-store.ts';
import type { AckedWrite } from './support/accounts-writer.ts';
import { type Child, spawnChild } from './support/children.ts';
import { prng } from './support/prng.ts';
import { ROOT } from './support/server-process.ts';

const ROUNDS = 20;
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-crash-'));
const path = join(dir, 'accounts.json');

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

interface Writer {
  child: Child;
  ready: { accounts: number; files: string[] };
  /** Every write acknowledged so far (complete once the child's output has closed). */
  acked: AckedWrite[];
  /** Resolves once the child's stdout has closed (all its lines read). */
  drained: Promise<void>;
}

/** The writer process (test/support/accounts-writer.ts) on the accounts file at `file`. */
function spawnWriter(name: string, file: string, onOutput?: (chunk: string) => void): Child {
  return spawnChild(name, process.execPath, ['--import', 'tsx', 'test/support/accounts-writer.ts'], {
    cwd: ROOT,
    env: { ...process.env, TSX_DISABLE_CACHE: '1', ACCOUNTS_FILE: file, LOG_LEVEL: 'warn' },
    ...(onOutput ? { onOutput } : {}),
  });
}

/** Starts the writer (its own process group) and waits until it has opened the store and is writing. */
async function startWriter(): Promise<Writer> {
  let output = '';
  const acked: AckedWrite[] = [];
  let resolveReady: (ready: Writer['ready']) => void = () => undefined;
  const ready = new Promise<Writer['ready']>((resolve) => {
    resolveReady = resolve;
  });
  let first: Writer['ready'] | undefined;
  const child = spawnWriter('accounts writer', path, (chunk) => {
    output += chunk;
    const lines = output.split('\n');
    output = lines.pop() ?? '';
    for (const line of lines) {
      if (line.startsWith('ack ')) acked.push(JSON.parse(line.slice(4)) as AckedWrite);
      else if (line === 'writing' && first) resolveReady(first);
      else if (line.startsWith('{"ready"')) first = JSON.parse(line);
    }
  });
  const stdout = child.proc.stdout;
  const drained = new Promise<void>((resolve) => {
    if (!stdout || stdout.closed) resolve();
    else stdout.once('close', () => resolve());
  });
  try {
    const started = await Promise.race([ready, child.exited.then(() => undefined)]);
    if (!started) throw new Error(`the writer exited before writing:\n${child.output()}`);
    return { child, ready: started, acked, drained };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

/** What lies beside the database besides itself and SQLite's write-ahead log and its index. */
function leftovers(): string[] {
  return readdirSync(dir).filter(
    (name) => !['accounts.json', 'accounts.json-wal', 'accounts.json-shm'].includes(name),
  );
}

describe('importing the accounts JSON file under kill -9', () => {
  it('leaves the whole JSON or the whole database, whenever the importer dies', async () => {
    const random = prng(11);
    const COUNT = 20_000;
    const importDir = mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-import-crash-'));
    const jsonPath = join(importDir, 'accounts.json');
    const accounts: Record<string, object> = {};
    const keys: Record<string, object> = {};
    for (let i = 0; i < COUNT; i++) {
      const id = `acc_${i.toString(16).padStart(16, '0')}`;
      accounts[id] = {
        id,
        email: `imported-${i}@example.com`,
        tier: 'free',
        passwordHash: '',
        createdAt: '2026-01-01T00:00:00.000Z',
      };
      const keyId = `key_${i.toString(16).padStart(16, '0')}`;
      keys[keyId] = {
        id: keyId,
        accountId: id,
        name: '',
        prefix: 'nsk_live_0000',
        last4: '0000',
        createdAt: '2026-01-01T00:00:00.000Z',
        lastUsedAt: null,
        revokedAt: null,
        hash: i.toString(16).padStart(64, '0'),
      };
    }
    const text = JSON.stringify({ version: 1, accounts, keys, sessions: {} });
    const lock = `${jsonPath}.import-lock`;
    /** The path holds the JSON again, alone (after an import that finished). */
    const resetToJson = () => {
      for (const name of readdirSync(importDir)) rmSync(join(importDir, name), { force: true });
      writeFileSync(jsonPath, text);
    };
    /** An importer (the writer, which opens the store as the server does) once its import has begun. */
    const startImporter = async () => {
      const child = spawnWriter('importer', jsonPath);
      const deadline = Date.now() + 60_000;
      while (!existsSync(lock) && child.running() && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 5));
      return child;
    };
    /** Every imported account is in the database at the path. */
    const checkImported = async () => {
      const store = openSqliteAccountStore(jsonPath);
      try {
        expect((await store.listAccounts()).length).toBeGreaterThanOrEqual(COUNT);
        for (const i of [0, COUNT / 2, COUNT - 1])
          expect((await store.findAccountByEmail(`imported-${i}@example.com`))?.id).toBe(
            `acc_${i.toString(16).padStart(16, '0')}`,
          );
      } finally {
        await store.close();
      }
    };
    resetToJson();
    // How long an import takes on this machine now: the kills below land within it, or just after.
    const timed = await startImporter();
    const began = Date.now();
    while (existsSync(lock) && timed.running()) await new Promise((r) => setTimeout(r, 5));
    const importMs = Date.now() - began;
    await timed.kill();
    await checkImported();
    let kills = 0;
    let stillJson = 0;
    let midImport = 0;
    try {
      for (let round = 0; round < 8; round++) {
        resetToJson();
        const child = await startImporter();
        await new Promise((r) => setTimeout(r, random() * importMs * 1.2));
        await child.kill();
        kills++;
        if (readdirSync(importDir).some((n) => n.startsWith(`accounts.json.importing-${child.pid}-`)))
          midImport++;
        const head = readFileSync(jsonPath, 'latin1');
        if (head.startsWith('{')) {
          stillJson++;
          expect(head, `round ${round}`).toBe(text);
        } else {
          expect(head.startsWith('SQLite format 3\0'), `round ${round}`).toBe(true);
          await checkImported();
        }
      }
      // Some kill landed while the database was being built (else this proves nothing).
      expect(midImport).toBeGreaterThan(0);
      // Whatever was left, the next start comes up with every imported account and nothing half-done.
      await checkImported();
      const left = readdirSync(importDir).filter(
        (n) => !/^accounts\.json(-wal|-shm|\.json-backup)?$/.test(n),
      );
      expect(left).toEqual([]);
      expect(readFileSync(join(importDir, 'accounts.json.json-backup'), 'utf8')).toBe(text);
      console.log(
        `accounts JSON import (${importMs} ms here): ${kills} SIGKILLs (${midImport} while the database was being built): ${stillJson} left the JSON whole, ${kills - stillJson} the database; the next start had all ${COUNT} accounts`,
      );
    } finally {
      rmSync(importDir, { recursive: true, force: true });
    }
  }, 300_000);
});

describe('embedded accounts database after kill -9', () => {
  it(`keeps every acknowledged write through ${ROUNDS} SIGKILLs mid-write`, async () => {
    const random = prng(10);
    // A long-running second process's store (the server while the admin CLI runs, or the reverse).
    const other = openSqliteAccountStore(path);
    const otherAccount = await other.createAccount({ email: 'other@example.com', tier: 'free' });
    const acked: AckedWrite[] = [];
    let accounts = 1;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const writer = await startWriter();
        // The restart came up and found every account written so far.
        expect(
          writer.ready.files.filter((n) => !n.startsWith('accounts.json')),
          `round ${round}`,
        ).toEqual([]);
        expect(writer.ready.accounts).toBe(accounts);
        await new Promise((r) => setTimeout(r, 5 + random() * 60));
        // SIGKILL to its whole group, like a crash; then read every line it printed before dying.
        await writer.child.kill();
        await writer.drained;
        acked.push(...writer.acked);
        expect(leftovers(), `round ${round}`).toEqual([]);
        // Whatever the moment of the kill, every acknowledged write is there, seen by the other process.
        const revoked = new Set(acked.flatMap((w) => ('revoked' in w ? [w.secret] : [])));
        // A revocation begun and never acknowledged may or may not have committed before the kill.
        const revoking = new Set(acked.flatMap((w) => ('revoking' in w ? [w.secret] : [])));
        for (const w of acked) {
          if ('account' in w && 'email' in w)
            expect((await other.findAccountByEmail(w.email))?.id, JSON.stringify(w)).toBe(w.account);
          if ('pro' in w) expect((await other.getAccount(w.pro))?.tier, JSON.stringify(w)).toBe('pro');
          if ('key' in w && !revoked.has(w.secret)) {
            const resolved = (await other.resolveKey(w.secret))?.key.id;
            if (revoking.has(w.secret)) expect([w.key, undefined], JSON.stringify(w)).toContain(resolved);
            else expect(resolved, JSON.stringify(w)).toBe(w.key);
          }
          if ('revoked' in w) expect(await other.resolveKey(w.secret), JSON.stringify(w)).toBeUndefined();
          if ('session' in w)
            expect((await other.resolveSession(w.session))?.accountId, JSON.stringify(w)).toBe(w.account);
        }
        accounts = (await other.listAccounts()).length;
        const check = new DatabaseSync(path, { readOnly: true });
        try {
          expect(check.prepare('PRAGMA integrity_check').get()).toEqual({ integrity_check: 'ok' });
        } finally {
          check.close();
        }
        if (round % 2 === 1) {
          // The running process writes: a dead writer's locks died with it (a lock left held would
          // make this fail with "database is locked" once the busy timeout passed).
          expect((await other.setTier(otherAccount.id, round % 4 === 1 ? 'pro' : 'free'))?.id).toBe(
            otherAccount.id,
          );
        }
      }
      console.log(
        `accounts database: ${ROUNDS} SIGKILLs mid-write; all ${acked.length} acknowledged writes survived (${accounts} accounts)`,
      );
      // The writer did write in every round (otherwise the kills prove nothing).
      expect(acked.filter((w) => 'account' in w && 'email' in w).length).toBeGreaterThanOrEqual(ROUNDS);
      const last = openSqliteAccountStore(path);
      expect((await last.listAccounts()).length).toBe(accounts);
      await last.close();
    } finally {
      await other.close();
    }
  }, 300_000);
});
