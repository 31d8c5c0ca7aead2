// A closed-loop HTTP load generator: `concurrency` connections each send the next image as soon as
// their previous answer arrived, for a fixed time. Bounded in time and count; loopback only.

import { Agent, request } from 'node:http';
import { connect, type Socket } from 'node:net';

// Keep-alive, as real clients do; enough sockets for the highest concurrency used.
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** Closes the kept-alive sockets, so the benchmark process can exit. */
export function closeLoadConnections(): void {
  agent.destroy();
}

export interface LoadResult {
  requests: number;
  failures: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p95: number;
  p99: number;
}

export function postOnce(
  url: string,
  body: Buffer,
  contentType: string,
): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: { 'content-type': contentType, 'content-length': String(body.length) },
        agent,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - started }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/**
 * One kept-alive HTTP/1.1 connection that sends pre-encoded requests and reads each answer's status
 * line, Content-Length and body, nothing else. The load generator shares the two cores with the server
 * it measures: Node's http client costs ~0.8 ms of CPU per request here, this ~0.1 ms.
 */
class LeanConnection {
  #socket: Socket | undefined;
  #pending: Buffer[] = [];
  #waiting: ((chunk: Buffer | null) => void) | undefined;
  constructor(
    private readonly host: string,
    private readonly port: number,
  ) {}

  #open(): Socket {
    const socket = connect(this.port, this.host);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.#deliver(chunk));
    const closed = () => {
      if (this.#socket === socket) this.#socket = undefined;
      this.#deliver(null);
    };
    socket.on('close', closed);
    socket.on('error', closed);
    this.#socket = socket;
    return socket;
  }

  #deliver(chunk: Buffer | null): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    if (waiting) waiting(chunk);
    else if (chunk) this.#pending.push(chunk);
  }

  #next(): Promise<Buffer | null> {
    const chunk = this.#pending.shift();
    if (chunk) return Promise.resolve(chunk);
    return new Promise((resolve) => {
      this.#waiting = resolve;
    });
  }

  /** Sends one request; resolves with the answer's status once its whole body has arrived. */
  async send(head: Buffer, body: Buffer): Promise<number> {
    this.#pending = [];
    const socket = this.#socket ?? this.#open();
    socket.cork();
    socket.write(head);
    socket.write(body);
    socket.uncork();
    let buffered = Buffer.alloc(0);
    let headerEnd = -1;
    while (headerEnd < 0) {
      const chunk = await this.#next();
      if (!chunk) throw new Error('connection closed before the answer');
      buffered = Buffer.concat([buffered, chunk]);
      headerEnd = buffered.indexOf('\r\n\r\n');
    }
    const header = buffered.subarray(0, headerEnd).toString('latin1');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(header)?.[1]);
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(header)?.[1]);
    if (!Number.isInteger(status) || !Number.isInteger(length))
      throw new Error(`unexpected answer: ${header}`);
    let received = buffered.length - headerEnd - 4;
    while (received < length) {
      const chunk = await this.#next();
      if (!chunk) throw new Error('connection closed inside the answer body');
      received += chunk.length;
    }
    if (/\r\nconnection: *close/i.test(header)) this.close();
    return status;
  }

  close(): void {
    this.#socket?.destroy();
    this.#socket = undefined;
  }
}

export async function runLoad(opts: {
  url: string;
  bodies: Buffer[];
  contentType: string;
  concurrency: number;
  seconds: number;
  maxRequests?: number;
}): Promise<LoadResult> {
  const target = new URL(opts.url);
  const heads = opts.bodies.map((body) =>
    Buffer.from(
      `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\nContent-Type: ${opts.contentType}\r\n` +
        `Content-Length: ${body.length}\r\n\r\n`,
      'latin1',
    ),
  );
  const latencies: number[] = [];
  let failures = 0;
  let next = 0;
  const deadline = performance.now() + opts.seconds * 1000;
  const max = opts.maxRequests ?? 100_000;
  const started = performance.now();
  const worker = async () => {
    const connection = new LeanConnection(target.hostname, Number(target.port));
    try {
      while (performance.now() < deadline && next < max) {
        const k = next++ % opts.bodies.length;
        const sent = performance.now();
        const status = await connection.send(heads[k] as Buffer, opts.bodies[k] as Buffer).catch(() => {
          connection.close(); // counted as a failure; the next request opens a fresh connection
          return 0;
        });
        if (status === 200) latencies.push(performance.now() - sent);
        else failures += 1;
      }
    } finally {
      connection.close();
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    requests: latencies.length,
    failures,
    seconds,
    perSecond: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
    p99: percentile(latencies, 99),
  };
}
