// Runs the real `npm start` entry point (or another service's thin server) as a child process, for
// tests that need the whole process: signals, the file system, the real model.
//
// The server binds port 0 and reports the port the OS gave it on stdout ({"msg":"listening","port":…},
// lib/common/announce-listening.ts): no port is chosen in advance, so no other test can take it
// in between. A start that fails (exit, no port, not ready) stops the process group before throwing.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Child, spawnChild } from './children.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface ServerProcess {
  url: string;
  port: number;
  proc: Child['proc'];
  output: () => string;
  /** The JSON log lines so far (other lines are skipped). */
  logLines: () => Array<Record<string, unknown>>;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  /** SIGTERM (then SIGKILL to the group after a grace period); resolves with the exit code. */
  stop: () => Promise<number | null>;
}

export interface ServiceOptions {
  /** The service's thin server, relative to the repository root. */
  entry: string;
  /** The variable the service reads its port from. */
  portVar: string;
  env?: Record<string, string>;
  /** What the start waits for: /internal/ready (default), the listening line only, or nothing (a start
   * that is expected to fail; the port is filled in if it comes). */
  waitFor?: 'ready' | 'listening' | 'nothing';
  /** How long the listening line, then readiness, may each take (default 120 s: the model loads). */
  startTimeoutMs?: number;
}

/** A start that failed; its process group has been stopped. */
export class StartFailed extends Error {
  constructor(
    message: string,
    readonly pid: number,
    readonly output: string,
  ) {
    super(message);
  }
}

/** Resolves with the port from the server's `{"msg":"listening","port":…}` line, or rejects when the
 * process exits first or `timeoutMs` passes. */
export function listeningPort(child: Child, timeoutMs = 120_000): Promise<number> {
  return new Promise((resolve, reject) => {
    const find = () => {
      for (const line of child.output().split('\n')) {
        if (!line.startsWith('{') || !line.includes('"listening"')) continue;
        try {
          const parsed = JSON.parse(line) as { msg?: string; port?: number };
          if (parsed.msg === 'listening' && typeof parsed.port === 'number') return parsed.port;
        } catch {
          // a partial line: wait for the rest
        }
      }
      return undefined;
    };
    const done = (fn: () => void) => {
      clearInterval(poll);
      clearTimeout(timer);
      fn();
    };
    const poll = setInterval(() => {
      const port = find();
      if (port !== undefined) done(() => resolve(port));
      else if (!child.running()) done(() => reject(new Error(`${child.label} exited before listening`)));
    }, 20);
    const timer = setTimeout(
      () => done(() => reject(new Error(`${child.label} reported no port after ${timeoutMs} ms`))),
      timeoutMs,
    );
  });
}

/** Runs a service's thin server as a child process on a port of the OS's choosing. */
export async function spawnService(opts: ServiceOptions): Promise<ServerProcess> {
  // A fresh accounts file per process unless the test names one: tests never touch .data/.
  const ownDir =
    opts.env?.ACCOUNTS_FILE === undefined ? mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-')) : undefined;
  // The source through tsx, so that a test sees the tree as it is without a build (`npm start` runs the
  // compiled dist/ of the same source: test/ready-line.test.ts); no npm in between, so signals and /proc
  // reach the server.
  const child = spawnChild(opts.entry, process.execPath, ['--import', 'tsx', opts.entry], {
    cwd: ROOT,
    env: {
      ...process.env,
      // No compile cache in TMPDIR.
      TSX_DISABLE_CACHE: '1',
      ...(ownDir ? { ACCOUNTS_FILE: join(ownDir, 'accounts.json') } : {}),
      HOST: '127.0.0.1',
      [opts.portVar]: '0',
      LOG_LEVEL: 'info',
      ...opts.env,
    },
  });
  const removeDir = () => ownDir && rmSync(ownDir, { recursive: true, force: true });
  void child.exited.then(removeDir);
  const server: ServerProcess = {
    url: '',
    port: 0,
    proc: child.proc,
    output: child.output,
    logLines: () => jsonLines(child.output()),
    exited: child.exited,
    stop: () => child.stop(),
  };
  if (opts.waitFor === 'nothing') {
    // The caller expects the start to fail (or waits itself): the port only if it comes.
    void listeningPort(child).then(
      (port) => Object.assign(server, { port, url: `http://127.0.0.1:${port}` }),
      () => undefined,
    );
    return server;
  }
  try {
    const port = await listeningPort(child, opts.startTimeoutMs);
    Object.assign(server, { port, url: `http://127.0.0.1:${port}` });
    if (opts.waitFor !== 'listening') await waitReady(server, child, opts.startTimeoutMs);
    return server;
  } catch (err) {
    await child.kill();
    const output = child.output();
    throw new StartFailed(
      `${opts.entry} did not start: ${(err as Error).message}\n${output}`,
      child.pid,
      output,
    );
  }
}

/** The embedded server (`npm start`). */
export function startServer(env: Record<string, string> = {}, opts: Pick<ServiceOptions, 'waitFor'> = {}) {
  return spawnService({ entry: 'services/all-in-one/server.ts', portVar: 'PORT', env, ...opts });
}

export type ClusterService = 'detect' | 'quota' | 'health';

const CLUSTER_PORT_VARS: Record<ClusterService, string> = {
  detect: 'DETECT_PORT',
  quota: 'QUOTA_PORT',
  health: 'HEALTH_PORT',
};

/** One cluster service's thin server (services/<name>/server.ts). Waits for the listening line only
 * by default: the tests watch readiness themselves (detect's comes after the model load). */
export function startClusterService(
  service: ClusterService,
  opts: Pick<ServiceOptions, 'env' | 'waitFor' | 'startTimeoutMs'> = {},
): Promise<ServerProcess> {
  return spawnService({
    entry: `services/${service}/server.ts`,
    portVar: CLUSTER_PORT_VARS[service],
    waitFor: 'listening',
    ...opts,
  });
}

/** Polls GET `path` until it answers `status` (e.g. detect's readiness after the model load). */
export async function waitForStatus(
  server: ServerProcess,
  path: string,
  status: number,
  timeoutMs = 120_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 0;
  while (Date.now() < deadline) {
    if (server.proc.exitCode !== null) throw new Error(`exited:\n${server.output()}`);
    last = await fetch(`${server.url}${path}`).then(
      (r) => r.status,
      () => 0,
    );
    if (last === status) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${server.url}${path}: ${last}, not ${status}, after ${timeoutMs} ms`);
}

function jsonLines(output: string): Array<Record<string, unknown>> {
  return output.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      const parsed = JSON.parse(line) as unknown;
      return parsed && typeof parsed === 'object' ? [parsed as Record<string, unknown>] : [];
    } catch {
      return [];
    }
  });
}

async function waitReady(server: ServerProcess, child: Child, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!child.running()) throw new Error('exited before it was ready');
    try {
      const res = await fetch(`${server.url}/internal/ready`);
      if (res.status === 200) return;
    } catch {
      // not answering yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`not ready after ${timeoutMs} ms`);
}

export interface OperatorOptions extends Pick<ServiceOptions, 'waitFor' | 'startTimeoutMs'> {
  /** The API server's kubeconfig. */
  kubeconfig: string;
  redisUrl: string;
  /** Its Lease identity (OPERATOR_IDENTITY). */
  identity?: string;
  /** default: `default`. */
  namespace?: string;
  /** More variables, or other values for these. */
  env?: Record<string, string>;
}

/**
 * The operator (services/operator/main.ts) on a real API server and Redis, with a short Lease (4 s,
 * retried every 500 ms) so that a test sees a takeover within seconds. Waits for its listening line
 * by default.
 */
export function spawnOperator(opts: OperatorOptions): Promise<ServerProcess> {
  return spawnService({
    entry: 'services/operator/main.ts',
    portVar: 'OPERATOR_METRICS_PORT',
    waitFor: opts.waitFor ?? 'listening',
    ...(opts.startTimeoutMs !== undefined && { startTimeoutMs: opts.startTimeoutMs }),
    env: {
      KUBECONFIG: opts.kubeconfig,
      REDIS_URL: opts.redisUrl,
      OPERATOR_NAMESPACE: opts.namespace ?? 'default',
      ...(opts.identity !== undefined && { OPERATOR_IDENTITY: opts.identity }),
      OPERATOR_LEASE_SECONDS: '4',
      OPERATOR_RETRY_MS: '500',
      ...opts.env,
    },
  });
}
