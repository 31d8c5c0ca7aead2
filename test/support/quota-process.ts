// Runs the quota service's thin server (services/quota/server.ts) as a child process on a free port.

import { spawn } from 'node:child_process';
import { freePort, ROOT, type ServerProcess } from './server-process.ts';

export async function startQuotaServer(env: Record<string, string> = {}): Promise<ServerProcess> {
  const port = await freePort();
  let output = '';
  const proc = spawn(process.execPath, ['--import', 'tsx', 'services/quota/server.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_DISABLE_CACHE: '1',
      HOST: '127.0.0.1',
      QUOTA_PORT: String(port),
      LOG_LEVEL: 'warn',
      ...env,
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
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`quota server exited early:\n${output}`);
    try {
      if ((await fetch(`${server.url}/internal/ready`)).status === 200) return server;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`quota server not ready after 60 s:\n${output}`);
}
