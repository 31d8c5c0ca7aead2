// Crash safety of the embedded accounts file with real processes: a child writes through the store
// (opened exactly as the server opens it) and is killed with SIGKILL mid-write, 20 times. Every restart
// must come up (a dead process's lock never blocks it), the file must always parse, no temp file (they
// hold key and password hashes) may survive a restart, and a writer that meets a dead process's lock
// while running (the server, when the admin CLI was killed) must recover it too.

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openFileAccountStore } from '../services/quota/stores/local-account-store.ts';
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
}

/** Starts the writer (its own process group) and waits until it has opened the store and is writing. */
async function startWriter(): Promise<Writer> {
  let output = '';
  let resolveReady: (ready: Writer['ready']) => void = () => undefined;
  const ready = new Promise<Writer['ready']>((resolve) => {
    resolveReady = resolve;
  });
  const child = spawnChild(
    'accounts writer',
    process.execPath,
    ['--import', 'tsx', 'test/support/accounts-writer.ts'],
    {
      cwd: ROOT,
      env: { ...process.env, TSX_DISABLE_CACHE: '1', ACCOUNTS_FILE: path, LOG_LEVEL: 'warn' },
      onOutput: (chunk) => {
        output += chunk;
        const lines = output.split('\n');
        if (lines.length > 1 && lines.includes('writing')) resolveReady(JSON.parse(lines[0] as string));
      },
    },
  );
  try {
    const first = await Promise.race([ready, child.exited.then(() => undefined)]);
    if (!first) throw new Error(`the writer exited before writing:\n${child.output()}`);
    return { child, ready: first };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

/** What lies beside the accounts file besides itself. */
function leftovers(): string[] {
  return readdirSync(dir).filter((name) => name !== 'accounts.json');
}

describe('embedded accounts file after kill -9', () => {
  it(`comes up after ${ROUNDS} SIGKILLs mid-write: the file parses, dead locks are recovered, no temp file survives`, async () => {
    const random = prng(10);
    // A long-running second process's store (the server while the admin CLI runs, or the reverse).
    const other = await openFileAccountStore(path);
    const otherAccount = await other.createAccount({ email: 'other@example.com', tier: 'free' });
    let locksLeft = 0;
    let tempsLeft = 0;
    let accounts = 1;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const writer = await startWriter();
        // The restart came up, found every account written so far, and nothing but the file beside it.
        expect(writer.ready.files, `round ${round}`).toEqual(['accounts.json']);
        expect(writer.ready.accounts).toBeGreaterThanOrEqual(accounts);
        await new Promise((r) => setTimeout(r, 5 + random() * 60));
        // SIGKILL to its whole group, like a crash.
        await writer.child.kill();
        const left = leftovers();
        if (left.some((n) => n === 'accounts.json.lock')) locksLeft++;
        if (left.some((n) => n.endsWith('.tmp'))) tempsLeft++;
        // Whatever the moment of the kill, the file is a whole state.
        const state = JSON.parse(readFileSync(path, 'utf8'));
        accounts = Object.keys(state.accounts).length;
        expect(state.version).toBe(1);
        if (round % 2 === 1) {
          // Every other round, the running process writes first: it meets the dead writer's lock
          // and must recover it (and sweep the temp files) rather than wait for it.
          expect((await other.setTier(otherAccount.id, round % 4 === 1 ? 'pro' : 'free'))?.id).toBe(
            otherAccount.id,
          );
          // No lock and no state temp file; a dead writer's lock attempt (its pid, no secret) may
          // wait for the next start, which the next round checks.
          expect(
            leftovers().filter((n) => !/^accounts\.json\.lock\.\d+\.[0-9a-f]{8}\.tmp$/.test(n)),
            `round ${round}`,
          ).toEqual([]);
        }
      }
      console.log(
        `accounts file: ${ROUNDS} SIGKILLs mid-write left the lock behind ${locksLeft} times and temp files ${tempsLeft} times; every restart came up (${accounts} accounts)`,
      );
      // The kills did land mid-write (otherwise this test proves nothing): the writer holds the lock
      // most of the time, so some kill must have left it behind.
      expect(locksLeft).toBeGreaterThan(0);
      // The last restart, in this process: opens, and leaves nothing but the file.
      const last = await openFileAccountStore(path);
      expect((await last.listAccounts()).length).toBe(accounts);
      expect(leftovers()).toEqual([]);
      await last.close();
    } finally {
      await other.close();
    }
  }, 300_000);
});
