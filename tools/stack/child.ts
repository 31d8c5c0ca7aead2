// A child process of the stack: its own process group (so stopping it stops whatever it spawned), its
// output kept (the tail) for diagnostics and optionally echoed with a name prefix, and the TCP ports
// it listens on read from /proc (children bind port 0; nobody guesses a free port).

import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const KEEP_OUTPUT = 64 * 1024;

export interface ChildOptions {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Echo each output line to this process's stdout, prefixed with the name. */
  echo?: boolean;
}

export class Child {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly exited: Promise<number | null>;
  #output = '';
  #spawnFailed = false;

  constructor(opts: ChildOptions) {
    this.name = opts.name;
    this.proc = spawn(opts.command, opts.args, {
      cwd: opts.cwd,
      env: opts.env as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
      // A process group of its own: a signal to the group reaches grandchildren too, and a Ctrl-C in
      // the terminal reaches only the supervisor, which then stops the children in order.
      detached: true,
    });
    this.exited = new Promise((resolve) => {
      this.proc.once('exit', (code) => resolve(code));
      // A command that cannot start (ENOENT) emits 'error' and never 'exit'.
      this.proc.once('error', (err) => {
        this.#spawnFailed = true;
        this.#output += `\n[spawn error] ${err.message}\n`;
        resolve(null);
      });
    });
    let partial = '';
    const take = (chunk: Buffer) => {
      const text = chunk.toString();
      this.#output = (this.#output + text).slice(-KEEP_OUTPUT);
      if (!opts.echo) return;
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) process.stdout.write(`[${this.name}] ${line}\n`);
    };
    this.proc.stdout?.on('data', take);
    this.proc.stderr?.on('data', take);
  }

  /** 0 when the command could not start. */
  get pid(): number {
    return this.proc.pid ?? 0;
  }

  get running(): boolean {
    return !this.#spawnFailed && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  output(): string {
    return this.#output;
  }

  /** Sends `signal` to the child's whole process group. */
  signal(signal: NodeJS.Signals): void {
    if (!this.running || !this.pid) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      // already gone
    }
  }

  /** SIGKILL, like a crash; resolves once the process is gone. */
  async kill(): Promise<void> {
    this.signal('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, then SIGKILL past `graceMs`; resolves with the exit code once the process is gone. */
  async stop(graceMs = 10_000): Promise<number | null> {
    if (this.running) {
      this.signal('SIGTERM');
      const timer = setTimeout(() => this.signal('SIGKILL'), graceMs);
      try {
        await this.exited;
      } finally {
        clearTimeout(timer);
      }
    } else {
      await this.exited;
    }
    // Anything left in the group (a grandchild that ignored SIGTERM) goes too.
    try {
      if (this.pid) process.kill(-this.pid, 'SIGKILL');
    } catch {
      // group empty
    }
    return this.proc.exitCode;
  }

  /** Throws with the output when the child has exited. */
  assertRunning(what: string): void {
    if (!this.running) {
      throw new Error(
        `${this.name} exited (${this.proc.exitCode ?? this.proc.signalCode}) ${what}:\n${this.#output}`,
      );
    }
  }
}

/** TCP ports process `pid` listens on (IPv4 and IPv6), from /proc. */
export function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m?.[1]) inodes.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  const ports = new Set<number>();
  for (const table of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local_address is cols[1] (hex ip:port), st is cols[3] (0A = LISTEN), inode is cols[9].
      if (cols[3] !== '0A' || !cols[9] || !inodes.has(cols[9])) continue;
      const port = Number.parseInt(cols[1]?.split(':')[1] ?? '', 16);
      if (port > 0) ports.add(port);
    }
  }
  return [...ports];
}

/** Polls `probe` until it returns a value (not undefined), the child dies, or the time is up. */
export async function waitFor<T>(
  child: Child | undefined,
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs: number,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    child?.assertRunning(`while waiting for ${what}`);
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${child ? `:\n${child.output()}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
