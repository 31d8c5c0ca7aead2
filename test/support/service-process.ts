// Runs one cluster service's thin server (services/<name>/server.ts) as a real process on port 0: the
// port is read from the JSON "listening" line it prints. Its own process group, so `stop()`/`kill()`
// reach whatever it spawned; `stopAll()` in afterAll cleans up even after a failed start.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './server-process.ts';

export type ClusterService = 'detect' | 'quota' | 'health';

const PORT_VARS: Record<ClusterService, string> = {
  detect: 'DETECT_PORT',
  quota: 'QUOTA_PORT',
  health: 'HEALTH_PORT',
};

export interface ServiceProcess {
  service: ClusterService;
  url: string;
  port: number;
  proc: ChildProcess;
  output(): string;
  /** Parsed JSON log lines so far (non-JSON lines are skipped). */
  logLines(): Array<Record<string, unknown>>;
  exited: Promise<number | null>;
  /** SIGTERM to the process; resolves with the exit code. */
  stop(): Promise<number | null>;
}

const started = new Set<ChildProcess>();

function killGroup(proc: ChildProcess, signal: NodeJS.Signals): void {
  if (proc.pid === undefined) return;
  try {
    process.kill(-proc.pid, signal);
  } catch {
    // gone already
  }
}

/** SIGKILLs every process group started here that is still running (afterAll). */
export async function stopAll(): Promise<void> {
  await Promise.all(
    [...started].map(async (proc) => {
      if (proc.exitCode === null && proc.signalCode === null) {
        const gone = new Promise((resolve) => proc.once('exit', resolve));
        killGroup(proc, 'SIGKILL');
        await gone;
      }
      started.delete(proc);
    }),
  );
}

export interface StartOptions {
  env?: Record<string, string>;
  /** Resolve once the listening line is out (default); false: resolve at once (boot failures). */
  waitListening?: boolean;
  timeoutMs?: number;
}

export async function startService(
  service: ClusterService,
  opts: StartOptions = {},
): Promise<ServiceProcess> {
  let output = '';
  const proc = spawn(process.execPath, ['--import', 'tsx', `services/${service}/server.ts`], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_DISABLE_CACHE: '1',
      ACCOUNTS_FILE: join(mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-')), 'accounts.json'),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      [PORT_VARS[service]]: '0',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  started.add(proc);
  proc.stdout?.on('data', (c) => (output += c));
  proc.stderr?.on('data', (c) => (output += c));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const logLines = () =>
    output.split('\n').flatMap((line) => {
      try {
        const parsed = JSON.parse(line) as unknown;
        return parsed && typeof parsed === 'object' ? [parsed as Record<string, unknown>] : [];
      } catch {
        return [];
      }
    });
  const server: ServiceProcess = {
    service,
    url: '',
    port: 0,
    proc,
    output: () => output,
    logLines,
    exited,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
  if (opts.waitListening === false) return server;
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  while (Date.now() < deadline) {
    const line = logLines().find((l) => l.msg === 'listening' && l.service === service);
    if (line) {
      server.port = line.port as number;
      server.url = `http://127.0.0.1:${server.port}`;
      return server;
    }
    if (proc.exitCode !== null || proc.signalCode !== null)
      throw new Error(`${service} exited before listening:\n${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${service} printed no listening line:\n${output}`);
}

/** Polls GET `path` until it answers `status` (e.g. detect's readiness after the model load). */
export async function waitForStatus(
  server: ServiceProcess,
  path: string,
  status: number,
  timeoutMs = 120_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 0;
  while (Date.now() < deadline) {
    if (server.proc.exitCode !== null) throw new Error(`${server.service} exited:\n${server.output()}`);
    last = await fetch(`${server.url}${path}`).then(
      (r) => r.status,
      () => 0,
    );
    if (last === status) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${server.service} ${path}: ${last}, not ${status}, after ${timeoutMs} ms`);
}
