// A real redis-server for tests and benchmarks: a free port, a temp dir, no persistence. It can be
// killed (SIGKILL, like a crash) and restarted on the same port.
//
// When redis-server is not installed: with CI=true the suite fails (CI must run it); elsewhere it is
// skipped with a message naming the install command: see `describeRedis` (describe-redis.ts).

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './server-process.ts';

export const REDIS_INSTALL_HINT = 'apt-get install redis-server  (or: bash .ci/install-tools.sh)';

export function redisServerPath(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

export class RedisServer {
  readonly port: number;
  readonly url: string;
  readonly #dir: string;
  #proc: ChildProcess | undefined;
  #output = '';

  private constructor(port: number) {
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
    this.#dir = mkdtempSync(join(tmpdir(), 'nsfwd-redis-'));
  }

  static async start(): Promise<RedisServer> {
    const server = new RedisServer(await freePort());
    await server.restart();
    return server;
  }

  get pid(): number | undefined {
    return this.#proc?.pid;
  }

  /** Starts (again) on the same port; resolves when it accepts connections. */
  async restart(): Promise<void> {
    if (this.#proc && this.#proc.exitCode === null && this.#proc.signalCode === null) return;
    const bin = redisServerPath();
    if (!bin) throw new Error(`redis-server is not installed: ${REDIS_INSTALL_HINT}`);
    this.#output = '';
    const proc = spawn(
      bin,
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.#dir,
        '--daemonize',
        'no',
        '--protected-mode',
        'no',
        '--loglevel',
        'warning',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    proc.stdout?.on('data', (c) => (this.#output += c));
    proc.stderr?.on('data', (c) => (this.#output += c));
    this.#proc = proc;
    await this.#waitListening();
  }

  /** SIGKILL: the server vanishes mid-run, like a crash. Resolves once the process is gone. */
  async kill(): Promise<void> {
    const proc = this.#proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGKILL');
    await gone;
  }

  /** SIGSTOP: the server hangs with its connections open (no answers) until `resume`. */
  pause(): void {
    this.#proc?.kill('SIGSTOP');
  }

  resume(): void {
    this.#proc?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    this.resume();
    await this.kill();
    rmSync(this.#dir, { recursive: true, force: true });
  }

  async #waitListening(timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const proc = this.#proc;
      if (proc && (proc.exitCode !== null || proc.signalCode !== null)) {
        throw new Error(`redis-server exited early:\n${this.#output}`);
      }
      if (await ping(this.port)) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`redis-server not listening on ${this.port} after ${timeoutMs} ms:\n${this.#output}`);
  }
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let reply = '';
    socket.setTimeout(500);
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (c) => {
      reply += c;
      if (reply.includes('\r\n')) {
        socket.destroy();
        resolve(reply.startsWith('+PONG'));
      }
    });
    socket.on('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.on('error', () => resolve(false));
  });
}
