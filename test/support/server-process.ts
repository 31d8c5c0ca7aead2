// Runs the real `npm start` entry point as a child process on a free port, for tests that need the
// whole process: signals, the file system, the real model.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

export interface ServerProcess {
  url: string;
  port: number;
  proc: ChildProcess;
  output: () => string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  stop: () => Promise<number | null>;
}

export interface ServiceOptions {
  /** The service's thin server, relative to the repository root. */
  entry: string;
  /** The variable the service reads its port from. */
  portVar: string;
  env?: Record<string, string>;
  waitReady?: boolean;
}

/** Runs a service's thin server as a child process on a free port, waiting for /internal/ready. */
export async function spawnService(opts: ServiceOptions): Promise<ServerProcess> {
  const port = await freePort();
  let output = '';
  // The same command as `npm start`, without npm in between, so signals and /proc reach the server.
  const proc = spawn(process.execPath, ['--import', 'tsx', opts.entry], {
    cwd: ROOT,
    env: {
      ...process.env,
      // As in `npm start`: no compile cache in TMPDIR.
      TSX_DISABLE_CACHE: '1',
      // A fresh accounts file per process unless the test names one: tests never touch .data/.
      ACCOUNTS_FILE: join(mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-')), 'accounts.json'),
      HOST: '127.0.0.1',
      [opts.portVar]: String(port),
      LOG_LEVEL: 'info',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stdout?.on('data', (c) => (output += c));
  proc.stderr?.on('data', (c) => (output += c));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const server: ServerProcess = {
    url: `http://127.0.0.1:${port}`,
    port,
    proc,
    output: () => output,
    exited,
    stop: async () => {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
  if (opts.waitReady !== false) await waitReady(server, opts.entry);
  return server;
}

/** The embedded server (`npm start`). */
export function startServer(env: Record<string, string> = {}, opts: { waitReady?: boolean } = {}) {
  return spawnService({ entry: 'services/all-in-one/server.ts', portVar: 'PORT', env, ...opts });
}

async function waitReady(server: ServerProcess, entry: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (server.proc.exitCode !== null) throw new Error(`${entry} exited early:\n${server.output()}`);
    try {
      const res = await fetch(`${server.url}/internal/ready`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`${entry} not ready after ${timeoutMs} ms:\n${server.output()}`);
}
