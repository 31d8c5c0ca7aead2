// `npm run admin -- backup FILE` while `npm start` runs and a writer streams sign-ups into the same
// ACCOUNTS_FILE: the copy passes `PRAGMA integrity_check` and holds every account acknowledged before
// the backup began. `restore FILE` is refused while the server has the file open, and once it is
// stopped puts the copy back: the restarted server accepts the keys of the copy and refuses the keys
// made after it.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import type { AckedWrite } from './support/accounts-writer.ts';
import { type Child, childEnv, spawnChild } from './support/children.ts';
import { eventually } from './support/eventually.ts';
import { ROOT, type ServerProcess, startServer } from './support/server-process.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-backup-'));
const env = { ACCOUNTS_FILE: join(dir, 'accounts.db') };
const servers: ServerProcess[] = [];
const children: Child[] = [];

afterAll(async () => {
  await Promise.all(children.map((c) => c.kill()));
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

function admin(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'services/admin/cli.ts', ...args],
      { cwd: ROOT, env: childEnv({ ...process.env, TSX_DISABLE_CACHE: '1', ...env }) },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}

/** test/support/accounts-writer.ts on ACCOUNTS_FILE: a stream of sign-ups, each printed once acknowledged. */
function startWriter(): { child: Child; acked: AckedWrite[] } {
  const acked: AckedWrite[] = [];
  let rest = '';
  const child = spawnChild(
    'accounts writer',
    process.execPath,
    ['--import', 'tsx', 'test/support/accounts-writer.ts'],
    {
      cwd: ROOT,
      env: { ...process.env, TSX_DISABLE_CACHE: '1', ...env, LOG_LEVEL: 'warn' },
      onOutput: (chunk) => {
        const lines = (rest + chunk).split('\n');
        rest = lines.pop() ?? '';
        for (const line of lines)
          if (line.startsWith('ack ')) acked.push(JSON.parse(line.slice(4)) as AckedWrite);
      },
    },
  );
  children.push(child);
  return { child, acked };
}

const accountsOf = (acked: AckedWrite[]) =>
  acked.flatMap((w) => ('account' in w && 'email' in w ? [w.account] : []));
/** Secrets of keys the writer made and never revoked. */
const keysOf = (acked: AckedWrite[]) => {
  const revoked = new Set(acked.flatMap((w) => ('revoked' in w ? [w.secret] : [])));
  return acked.flatMap((w) => ('key' in w && !revoked.has(w.secret) ? [w.secret] : []));
};

describe('admin backup and restore of the embedded store', () => {
  it('backs up while the server runs and sign-ups stream in; restores once the server is stopped', async () => {
    const server = await startServer(env);
    servers.push(server);
    const writer = startWriter();
    await eventually('100 sign-ups acknowledged', async () =>
      accountsOf(writer.acked).length > 100 ? true : undefined,
    );

    const before = accountsOf(writer.acked);
    const keysBefore = keysOf(writer.acked);
    const backupFile = join(dir, 'backup.db');
    const taken = await admin('backup', backupFile, '--json');
    expect(taken.code, taken.stderr).toBe(0);
    const during = accountsOf(writer.acked).length;
    expect(during, 'sign-ups went on during the backup').toBeGreaterThan(before.length);
    expect(statSync(backupFile).mode & 0o777).toBe(0o600);

    const copy = new DatabaseSync(backupFile, { readOnly: true });
    let inCopy: Set<string>;
    try {
      expect(copy.prepare('PRAGMA integrity_check').all()).toEqual([{ integrity_check: 'ok' }]);
      inCopy = new Set(
        (copy.prepare('SELECT id FROM accounts').all() as Array<{ id: string }>).map((r) => r.id),
      );
    } finally {
      copy.close();
    }
    expect(before.filter((id) => !inCopy.has(id))).toEqual([]);
    expect(JSON.parse(taken.stdout).accounts).toBe(inCopy.size);

    await writer.child.kill();
    const stillActive = new Set(keysOf(writer.acked));
    const after = [...stillActive].filter((secret) => !keysBefore.includes(secret));
    const early = keysBefore.find((secret) => stillActive.has(secret)) as string;
    const detect = (url: string, secret: string) =>
      fetch(`${url}/api/open/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${secret}` },
        body: JPEG,
      });
    // A key made after the backup works now ...
    const lateKey = after.at(-1) as string;
    expect((await detect(server.url, lateKey)).status).toBe(200);

    const refused = await admin('restore', backupFile);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /is in use \(the server, or another admin command, has it open\): stop the server first/,
    );

    expect(await server.stop()).toBe(0);
    const restored = await admin('restore', backupFile);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stdout).toContain(`restored ${inCopy.size} account(s)`);

    // ... and not after the restore; a key from before the backup does.
    const again = await startServer(env);
    servers.push(again);
    expect((await detect(again.url, early)).status).toBe(200);
    const gone = await detect(again.url, lateKey);
    expect(gone.status).toBe(401);
    const listed = await admin('list-accounts', '--json');
    expect(JSON.parse(listed.stdout).accounts).toHaveLength(inCopy.size);
    // Two server starts (model loaded, workers warm) and a writer process: minutes on a loaded machine.
  }, 240_000);

  it('explains a bad backup file and a missing argument with exit codes', async () => {
    expect((await admin('backup')).code).toBe(2);
    expect((await admin('restore')).code).toBe(2);
    const notOne = await admin('restore', join(ROOT, 'package.json'));
    expect(notOne.code).toBe(1);
    expect(notOne.stderr).toMatch(
      /^restore failed: .*package\.json is not a backup of the accounts database/,
    );
  });
});
