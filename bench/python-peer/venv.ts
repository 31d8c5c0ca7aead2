// Where the Python peer lives and how it is started: its venv in the tools cache, named after the hash
// of requirements.txt exactly as .ci/install-tools.sh names it (so a changed pin means a fresh venv).

import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Child, spawnChild } from '../../test/support/children.ts';
import { TOOLS_DIR } from '../../tools/stack/tools.ts';

const PEER_DIR = fileURLToPath(new URL('.', import.meta.url));
export const PEER_SERVER = join(PEER_DIR, 'server.py');
export const PEER_INSTALL = 'bash .ci/install-tools.sh';
/** The peer's scores.nsfw must match ours to this (it reproduces our pipeline; in practice they are
 * bit-identical: same libvips, same onnxruntime, the same resize kernel in float64). */
export const PEER_SCORE_BOUND = 1e-5;

const hash = createHash('sha256')
  .update(readFileSync(join(PEER_DIR, 'requirements.txt')))
  .digest('hex')
  .slice(0, 12);
export const PEER_VENV = join(TOOLS_DIR, `python-peer-${hash}`);
export const PEER_PYTHON = join(PEER_VENV, 'bin', 'python');

/** The venv's python when the install finished (its marker is written last), else undefined. */
export function findPeerPython(): string | undefined {
  return existsSync(join(PEER_VENV, '.installed')) ? PEER_PYTHON : undefined;
}

export interface PeerProcess {
  url: string;
  child: Child;
  stop: () => Promise<number | null>;
}

/** Starts the peer on a port of the OS's choosing; resolves once every worker has loaded and warmed
 * its model (each prints a "worker ready" line) and /ready answers 200. */
export async function startPeer(opts: { workers?: number; timeoutMs?: number } = {}): Promise<PeerProcess> {
  const python = findPeerPython();
  if (!python) throw new Error(`the Python peer's venv is missing (${PEER_VENV}); install: ${PEER_INSTALL}`);
  const workers = opts.workers ?? 2;
  const timeoutMs = opts.timeoutMs ?? 120_000;
  // uvicorn's own command line, as the peer would be deployed: a light supervisor that binds the socket
  // and logs the port it got (0: the OS chooses), and `workers` spawned processes that import the app.
  // The command line is uvicorn's, so server.py holds nothing but the app.
  const args = ['-m', 'uvicorn', 'server:app', '--app-dir', PEER_DIR, '--host', '127.0.0.1', '--port', '0'];
  args.push('--workers', String(workers), '--loop', 'uvloop', '--http', 'httptools', '--no-access-log');
  const child = spawnChild('python peer', python, args, {
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
  });
  try {
    const url = `http://127.0.0.1:${await uvicornPort(child, timeoutMs)}`;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const warmed = child.output().match(/"worker ready"/g)?.length ?? 0;
      const ready = await fetch(`${url}/ready`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (warmed >= workers && ready) break;
      if (!child.running()) throw new Error('exited before it was ready');
      if (Date.now() > deadline) throw new Error(`not ready after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return { url, child, stop: () => child.stop() };
  } catch (err) {
    await child.kill();
    throw new Error(`the Python peer did not start: ${(err as Error).message}\n${child.output()}`);
  }
}

/** The port from uvicorn's "Uvicorn running on http://host:port" line. */
async function uvicornPort(child: Child, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const port = /Uvicorn running on http:\/\/[^\s:]+:(\d+)/.exec(child.output())?.[1];
    if (port) return Number(port);
    if (!child.running()) throw new Error('exited before listening');
    if (Date.now() > deadline) throw new Error(`no port after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
