// A closed-loop HTTP load generator: `concurrency` workers each send the next image as soon as their
// previous answer arrived, for a fixed time. Bounded in time and count; loopback only.

import { Agent, request } from 'node:http';

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

export async function runLoad(opts: {
  url: string;
  bodies: Buffer[];
  contentType: string;
  concurrency: number;
  seconds: number;
  maxRequests?: number;
}): Promise<LoadResult> {
  const latencies: number[] = [];
  let failures = 0;
  let next = 0;
  const deadline = performance.now() + opts.seconds * 1000;
  const max = opts.maxRequests ?? 100_000;
  const started = performance.now();
  const worker = async () => {
    while (performance.now() < deadline && next < max) {
      const body = opts.bodies[next++ % opts.bodies.length] as Buffer;
      const { status, ms } = await postOnce(opts.url, body, opts.contentType);
      if (status === 200) latencies.push(ms);
      else failures += 1;
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
