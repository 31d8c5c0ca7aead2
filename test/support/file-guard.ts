// vitest setupFile: each test file gets its own temp dir (TMPDIR, inherited by its children), and
// after the file's own afterAll hooks it fails the file if a child it started is still running (the
// group is killed) or if an nsfw* temp dir is left; the file's temp dir is then removed.

import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { killAllChildren } from './children.ts';
import { LEFTOVER } from './run-guard.ts';

const saved = { TMPDIR: process.env.TMPDIR, TMP: process.env.TMP, TEMP: process.env.TEMP };
const fileTmp = mkdtempSync(join(tmpdir(), 'file-'));
Object.assign(process.env, { TMPDIR: fileTmp, TMP: fileTmp, TEMP: fileTmp });

// Registered before the file's own hooks, so (hooks run as a stack) it runs after all of them.
afterAll(() => {
  const left = killAllChildren();
  let dirs: string[] = [];
  try {
    dirs = readdirSync(fileTmp).filter((name) => LEFTOVER.test(name));
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(fileTmp, { recursive: true, force: true });
  }
  const problems: string[] = [];
  if (left.length > 0)
    problems.push(`children still running after the file's hooks (now killed): ${left.join(', ')}`);
  if (dirs.length > 0) problems.push(`temp dirs left behind: ${dirs.join(', ')}`);
  if (problems.length > 0) throw new Error(problems.join('; '));
});
