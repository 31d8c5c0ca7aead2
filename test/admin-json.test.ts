// The README's way for scripts to call the admin CLI — `npm run --silent admin -- … --json` — prints
// exactly one JSON document on stdout (no npm banner), so `JSON.parse(stdout)` works.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-admin-json-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const npmAdmin = (...args: string[]) =>
  run('npm', ['run', '--silent', 'admin', '--', ...args, '--json'], {
    cwd: ROOT,
    env: { ...process.env, ACCOUNTS_FILE: join(dir, 'accounts.json') },
  });

describe('npm run --silent admin -- … --json', () => {
  it('prints only JSON on stdout', async () => {
    const created = await npmAdmin('create-account', '--email', 'script@example.com', '--tier', 'free');
    expect(JSON.parse(created.stdout)).toMatchObject({
      account: { email: 'script@example.com', tier: 'free' },
    });
    const issued = await npmAdmin('issue-key', 'script@example.com', '--name', 'ci');
    expect(JSON.parse(issued.stdout).secret).toMatch(/^nsk_live_[0-9a-f]{32}$/);
    const listed = await npmAdmin('list-accounts');
    expect(JSON.parse(listed.stdout).accounts).toHaveLength(1);
  }, 120_000);
});
