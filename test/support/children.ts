// Every process a test starts goes through `spawnChild`: it runs in its own process group (detached),
// so stopping it also stops whatever it started, and it carries a marker in its environment, so the
// run's final check (run-guard.ts) finds it, and its descendants, if anything is left running.
// Three nets catch a child a test forgot or could not stop (start-up failed, the test timed out):
// the file's afterAll (file-guard.ts), this worker's 'exit' handler, and the run's global teardown.

import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Set in every child's environment to the run's id (run-guard.ts); inherited by its descendants. A
 * run started by a test (test-harness.test.ts runs vitest on fixtures) appends its own id after a
 * comma, so what the inner run leaves is found by both runs' checks, even when the inner run is
 * killed before its own check. */
export const CHILD_MARKER = 'NSFWDETECTOR_TEST_CHILD';
/** The run's id, set by run-guard.ts in the main vitest process and inherited by the workers. */
export const RUN_VAR = 'NSFWDETECTOR_TEST_RUN';

export interface Child {
  readonly label: string;
  readonly proc: ChildProcess;
  readonly pid: number;
  /** stdout + stderr so far. */
  output(): string;
  /** Resolves when the process has exited, with its code (null when a signal ended it). */
  readonly exited: Promise<number | null>;
  running(): boolean;
  /** SIGTERM to the process, SIGKILL to its whole group after `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
  /** SIGKILL to the whole group, like a crash; resolves once the process is gone. */
  kill(): Promise<void>;
}

const live = new Set<Child>();

/** The environment a child gets: the caller's, plus the run's marker (also for tools like Playwright
 * that spawn browsers themselves). */
export function childEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const run = process.env[RUN_VAR] ?? 'unguarded';
  const outer = env[CHILD_MARKER];
  const chain = outer === undefined ? [] : outer.split(',');
  return { ...env, [CHILD_MARKER]: chain.includes(run) ? outer : [...chain, run].join(',') };
}

/** Whether a process environment's marker (CHILD_MARKER's value) names the run `runId`. */
export function markedFor(marker: string, runId: string): boolean {
  return marker.split(',').includes(runId);
}

export interface SpawnOptions {
  cwd?: string;
  /** The child's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Called with each chunk of stdout and stderr. */
  onOutput?: (chunk: string) => void;
}

export function spawnChild(label: string, command: string, args: string[], opts: SpawnOptions = {}): Child {
  const proc = spawn(command, args, {
    cwd: opts.cwd,
    env: childEnv(opts.env ?? process.env),
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group (setsid): `kill(-pid)` reaches it and everything it started.
    detached: true,
  });
  if (proc.pid === undefined) throw new Error(`${label}: could not start ${command}`);
  const pid = proc.pid;
  let output = '';
  const take = (chunk: Buffer) => {
    const text = chunk.toString();
    output += text;
    opts.onOutput?.(text);
  };
  proc.stdout?.on('data', take);
  proc.stderr?.on('data', take);
  const exited = new Promise<number | null>((resolve) => {
    proc.once('exit', (code) => resolve(code));
    proc.once('error', () => resolve(null));
  });
  const running = () => proc.exitCode === null && proc.signalCode === null;
  const child: Child = {
    label,
    proc,
    pid,
    output: () => output,
    exited,
    running,
    async stop(graceMs = 20_000) {
      if (running()) proc.kill('SIGTERM');
      const timer = setTimeout(() => killGroup(pid), graceMs);
      const code = await exited;
      clearTimeout(timer);
      // The leader is gone; anything left in its group goes with it.
      killGroup(pid);
      live.delete(child);
      return code;
    },
    async kill() {
      killGroup(pid);
      await exited;
      live.delete(child);
    },
  };
  live.add(child);
  void exited.then(() => {
    if (!groupAlive(pid)) live.delete(child);
  });
  return child;
}

/** Children of this worker whose process group still has a member. */
export function liveChildren(): Child[] {
  return [...live].filter((c) => c.running() || groupAlive(c.pid));
}

/** SIGKILLs every child group this worker started that is still there; returns their labels. */
export function killAllChildren(): string[] {
  const left = liveChildren();
  for (const child of left) killGroup(child.pid);
  live.clear();
  return left.map((c) => `${c.label} (pid ${c.pid})`);
}

export function killGroup(pgid: number, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the group is already empty.
  }
}

/** Whether `pid` is a running process (a zombie, dead but not yet reaped, is not). */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return /\)\s+(\S)/.exec(stat)?.[1] !== 'Z';
  } catch {
    return false;
  }
}

export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

// The worker is going away (end of its files, a crash, process.exit): take every child with it.
process.once('exit', () => {
  killAllChildren();
});
