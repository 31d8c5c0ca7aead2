// vitest globalSetup: the run's own temp dir and the final check that a run leaves nothing behind.
//
// Setup: TMPDIR (inherited by the workers and every child) points at a fresh directory for this run,
// so what the run leaves there is its own, whatever else runs on the machine; every child carries
// the run's id in its environment (children.ts).
// Teardown: fails the run if any process with the run's id is still alive (it is killed first), or
// if any nsfw* directory (tests name theirs nsfwdetector-…) is left in the run's temp dir; then removes
// the temp dir.

import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { CHILD_MARKER, killGroup, markedFor, RUN_VAR } from './children.ts';
import { SKIPS_DIR_VAR } from './tools.ts';

/** Temp dirs a test leaves behind: this run's, by name. */
export const LEFTOVER = /^nsfw/;

// Every project of the config inherits this globalSetup, all in one process: the first sets the run up,
// the others share it (nested run dirs would make paths too long for Chromium's socket).
const ACTIVE = Symbol.for('nsfwdetector.run-guard');
type Holder = { [ACTIVE]?: number };

export default function setup(): () => void {
  const holder = globalThis as Holder;
  if (holder[ACTIVE]) {
    holder[ACTIVE]++;
    return () => {
      (holder[ACTIVE] as number)--;
    };
  }
  holder[ACTIVE] = 1;
  const runDir = mkdtempSync(join(tmpdir(), 'vitest-run-'));
  const tmp = join(runDir, 'tmp');
  mkdirSync(tmp);
  const saved = { TMPDIR: process.env.TMPDIR, TMP: process.env.TMP, TEMP: process.env.TEMP };
  Object.assign(process.env, { TMPDIR: tmp, TMP: tmp, TEMP: tmp });
  process.env[RUN_VAR] = basename(runDir);
  process.env[SKIPS_DIR_VAR] = join(runDir, 'skips');

  return () => {
    holder[ACTIVE] = 0;
    const problems: string[] = [];
    const alive = processesOfRun(basename(runDir));
    for (const p of alive) {
      killGroup(p.pid);
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    if (alive.length > 0) {
      problems.push(
        `${alive.length} process(es) started by the tests were still running (now killed):\n` +
          alive.map((p) => `  pid ${p.pid}: ${p.cmdline}`).join('\n'),
      );
    }
    const dirs = leftovers(tmp);
    if (dirs.length > 0)
      problems.push(`temp dirs left behind by the tests:\n${dirs.map((d) => `  ${d}`).join('\n')}`);
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(runDir, { recursive: true, force: true });
    if (problems.length > 0) {
      // vitest reports a throwing teardown but keeps exit code 0: set it.
      process.exitCode = 1;
      throw new Error(`the run left things behind:\n${problems.join('\n')}`);
    }
  };
}

/** nsfw* entries in `dir` and one level below (the per-file temp dirs of file-guard.ts). */
export function leftovers(dir: string): string[] {
  const found: string[] = [];
  for (const name of safeList(dir)) {
    if (LEFTOVER.test(name)) found.push(join(dir, name));
    else
      for (const inner of safeList(join(dir, name)))
        if (LEFTOVER.test(inner)) found.push(join(dir, name, inner));
  }
  return found;
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Live (not zombie) processes whose environment carries this run's child marker. */
export function processesOfRun(runId: string): Array<{ pid: number; cmdline: string }> {
  const prefix = `${CHILD_MARKER}=`;
  const found: Array<{ pid: number; cmdline: string }> = [];
  for (const entry of safeList('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const marker = readFileSync(`/proc/${pid}/environ`, 'latin1')
        .split('\0')
        .find((entry) => entry.startsWith(prefix));
      if (marker === undefined || !markedFor(marker.slice(prefix.length), runId)) continue;
      const state = /\)\s+(\S)/.exec(readFileSync(`/proc/${pid}/stat`, 'latin1'))?.[1];
      if (state === 'Z') continue;
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
      found.push({ pid, cmdline });
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}
