// SIGTERM with a scoring thread blocked in native code: Node joins every worker thread on exit, so
// process.exit() alone would wait for that thread forever. The shutdown must still end the process
// (lib/common/shutdown.ts), and say why it ended it the hard way.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Child, spawnChild } from './support/children.ts';
import { eventually } from './support/eventually.ts';
import { ROOT } from './support/server-process.ts';

let child: Child | undefined;
let dir: string | undefined;
afterEach(async () => {
  await child?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
  child = undefined;
  dir = undefined;
});

describe('shutdown with a scoring thread stuck in native code', () => {
  it('ends the process on SIGTERM instead of waiting for the thread', async () => {
    dir = mkdtempSync(join(tmpdir(), 'nsfwd-stuck-'));
    const fifo = join(dir, 'hold');
    execFileSync('mkfifo', [fifo]);
    child = spawnChild(
      'stuck-worker-process',
      process.execPath,
      ['--import', 'tsx', 'test/support/stuck-worker-process.ts', fifo],
      { cwd: ROOT },
    );
    const started = child;
    await eventually('the worker to block', async () =>
      started.output().includes('held') ? true : undefined,
    );
    started.proc.kill('SIGTERM');
    await started.exited;
    // Without the hard exit the process would never end and the test would time out here.
    expect(started.proc.signalCode).toBe('SIGKILL');
    expect(started.output()).toMatch(/scoring worker stuck/);
    expect(started.output()).toMatch(/exiting by SIGKILL: threads stuck in native code/);
  });
});
