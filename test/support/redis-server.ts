// A real redis-server for tests and benchmarks: a TCP port of its own, a temp dir, no persistence. It
// can be killed (SIGKILL, like a crash) and restarted on the same port.
//
// The port: Redis cannot bind port 0 and report it (`--port 0` turns TCP off), and the tests want TCP,
// as in production. So the port is drawn at random BELOW the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range): the OS never hands such a port to a `listen(0)` or to an
// outgoing connection, so nothing else in the run takes it, and a restart on the same port after a
// kill cannot find it taken by a client's local port (or by a client reconnecting to itself, which
// the kernel allows on an ephemeral port with no listener). Two draws that meet (another redis, an
// unrelated service) fail with "Address already in use", and the start retries with a fresh draw.
//
// When redis-server is not installed: with CI=true the suite fails (CI must run it); elsewhere it is
// skipped with a line naming the install command: see `describeWithTool` and REDIS_SERVER (tools.ts).

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Child, spawnChild } from './children.ts';
import { REDIS_SERVER, requireTool } from './tools.ts';

const ADDRESS_IN_USE = /Address already in use/;
const READY = /Ready to accept connections|Sentinel ID is/;

export interface RedisServerOptions {
  /** For the test of the port retry. */
  firstPort?: number;
  /** More redis-server options (`['--replicaof', '127.0.0.1', '6379']`, cluster options …). */
  args?: string[];
  /** A sentinel: its configuration file's lines for a port (it rewrites the file as it learns). */
  sentinelConfig?: (port: number) => string;
}

/** A random port below the ephemeral range (see the top of this file). */
function drawPort(): number {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  } catch {
    // not Linux: the IANA ephemeral range starts at 49152; 32768 is below it as well
  }
  const from = Math.min(10_000, low - 1000);
  return from + Math.floor(Math.random() * (low - from));
}

export class RedisServer {
  #port: number;
  readonly #dir: string;
  #child: Child | undefined;
  readonly #opts: RedisServerOptions;

  private constructor(port: number, opts: RedisServerOptions) {
    this.#port = port;
    this.#opts = opts;
    this.#dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-redis-'));
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.#port}`;
  }

  get address(): { host: string; port: number } {
    return { host: '127.0.0.1', port: this.#port };
  }

  /** Starts on a port of its own (retrying a port found taken); on failure nothing is left behind. */
  static async start(opts: RedisServerOptions = {}): Promise<RedisServer> {
    const server = new RedisServer(opts.firstPort ?? drawPort(), opts);
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          await server.restart();
          return server;
        } catch (err) {
          if (!(err instanceof PortTaken) || attempt === 20) throw err;
          server.#port = drawPort();
        }
      }
    } catch (err) {
      await server.stop();
      throw err;
    }
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Starts (again) on the same port; resolves when it accepts connections. A port held by someone
   * else (only possible before the first start) rejects with PortTaken. */
  async restart(): Promise<void> {
    if (this.#child?.running()) return;
    const bin = requireTool(REDIS_SERVER);
    // Its own session already: no --daemonize; the process group is the server alone.
    const label = `${this.#opts.sentinelConfig ? 'redis-sentinel' : 'redis-server'} :${this.#port}`;
    if (this.#opts.sentinelConfig) {
      const file = join(this.#dir, 'sentinel.conf');
      writeFileSync(
        file,
        `port ${this.#port}\nbind 127.0.0.1\nprotected-mode no\ndir ${this.#dir}\n${this.#opts.sentinelConfig(this.#port)}\n`,
      );
      this.#child = spawnChild(label, bin, [file, '--sentinel']);
    } else {
      this.#child = spawnChild(label, bin, [
        '--port',
        String(this.#port),
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
        // notice: the "Ready to accept connections" line is how a start is known to be ours (a ping
        // could reach another server that holds the port while this one is failing to bind it).
        '--loglevel',
        'notice',
        ...(this.#opts.args ?? []),
      ]);
    }
    try {
      await this.#waitListening(this.#child);
    } catch (err) {
      await this.#child.kill();
      throw err;
    }
  }

  /** SIGKILL: the server vanishes mid-run, like a crash. Resolves once the process is gone. */
  async kill(): Promise<void> {
    await this.#child?.kill();
  }

  /** SIGSTOP: the server hangs with its connections open (no answers) until `resume`. */
  pause(): void {
    this.#child?.proc.kill('SIGSTOP');
  }

  resume(): void {
    this.#child?.proc.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    if (this.#child?.running()) this.resume();
    await this.kill();
    rmSync(this.#dir, { recursive: true, force: true });
  }

  async #waitListening(child: Child, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!child.running()) {
        await child.exited;
        if (ADDRESS_IN_USE.test(child.output())) throw new PortTaken(this.#port);
        throw new Error(`redis-server exited early:\n${child.output()}`);
      }
      if (READY.test(child.output()) && (await ping(this.#port))) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`redis-server not listening on ${this.#port} after ${timeoutMs} ms:\n${child.output()}`);
  }
}

class PortTaken extends Error {
  constructor(port: number) {
    super(`port ${port} is taken`);
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
