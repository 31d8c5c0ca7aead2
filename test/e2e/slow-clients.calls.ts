// The other clients of the slowloris tests (slow-clients.test.ts through the stack,
// test/kube/edge-slowloris.suite.ts through the chart on the local node): health and detect calls, each
// on a connection of its own, spread over a while, and their summary.

import { request } from 'node:http';
import { JPEG } from '../support/stack-client.ts';

/** Calls of each kind, spread over CALLS_MS (the finding: 0 of 90 in 50 s). */
export const CALLS = 90;
export const CALLS_MS = 50_000;

export interface CallResult {
  kind: 'health' | 'detect';
  status: number | string;
  ms: number;
  /** When it started, ms after the first. */
  at: number;
}

/** One request on a connection of its own (from `localAddress`, if given); the status or the error's code. */
export function call(
  edge: { host: string; port: number },
  localAddress: string | undefined,
  method: 'GET' | 'POST',
  path: string,
): Promise<{ status: number | string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request(
      {
        host: edge.host,
        port: edge.port,
        ...(localAddress ? { localAddress } : {}),
        method,
        path,
        agent: false,
        timeout: 20_000,
        headers: method === 'POST' ? { 'content-type': 'image/jpeg', 'content-length': JPEG.length } : {},
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - started }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('no answer in 20 s')));
    req.on('error', (err: NodeJS.ErrnoException) =>
      resolve({ status: err.code ?? err.message, ms: performance.now() - started }),
    );
    req.end(method === 'POST' ? JPEG : undefined);
  });
}

/** CALLS health and CALLS detect calls spread over CALLS_MS, several at once; every answer. */
export async function callThroughout(
  edge: { host: string; port: number },
  from: { health?: string; detect?: string } = {},
): Promise<{ results: CallResult[]; seconds: number }> {
  const results: CallResult[] = [];
  const calls: Array<Promise<void>> = [];
  const started = performance.now();
  for (let i = 0; i < CALLS; i++) {
    const at = Math.round(performance.now() - started);
    calls.push(
      call(edge, from.health, 'GET', '/api/public/health').then((r) => {
        results.push({ kind: 'health', at, ...r });
      }),
      call(edge, from.detect, 'POST', '/api/public/detect').then((r) => {
        results.push({ kind: 'detect', at, ...r });
      }),
    );
    await new Promise((r) => setTimeout(r, CALLS_MS / CALLS));
  }
  await Promise.all(calls);
  return { results, seconds: (performance.now() - started) / 1000 };
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;

/** One kind's statuses, latencies and the moments of its failures. */
export function summary(results: readonly CallResult[], kind: CallResult['kind']) {
  const mine = results.filter((r) => r.kind === kind);
  const ms = mine.map((r) => r.ms).sort((a, b) => a - b);
  const statuses: Record<string, number> = {};
  for (const r of mine) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  return {
    statuses,
    p50Ms: Math.round(percentile(ms, 50)),
    p99Ms: Math.round(percentile(ms, 99)),
    failedAtMs: mine.filter((r) => r.status !== 200).map((r) => r.at),
  };
}
