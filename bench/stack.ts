// The cost of the edge: the same detect load through the cluster stack (Envoy → ext_authz to the
// quota service on Redis → detect) beside the embedded process (`npm start`), in alternating rounds of
// the same run (this VM's speed drifts over tens of seconds). The stack runs as `npm run stack` does,
// tracing included (Envoy samples every request; the services export their spans to Jaeger).

import { readFileSync } from 'node:fs';
import { type ChildName, startStack } from '../services/stack/stack.ts';
import { missingTools } from '../services/stack/tools.ts';
import { runLoad } from './http-load.ts';

const fmt = (x: number, digits = 1) => x.toFixed(digits);

/** CPU time (user + system, all threads) a process has used so far, in ms, from /proc/<pid>/stat. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticksPerSecond = 100; // USER_HZ on Linux
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

/** The stack's processes a detect request passes through (health is not on the path). */
const ON_THE_PATH: ChildName[] = ['envoy', 'quota', 'redis', 'detect', 'jaeger'];

export async function stackFigures(opts: {
  /** The embedded server's detect URL (already warm). */
  embeddedUrl: string;
  /** The embedded server's pid (its CPU per request is read from /proc). */
  embeddedPid: number;
  bodies: Buffer[];
  seconds: number;
  env: Record<string, string>;
}): Promise<Array<[string, string]>> {
  const missing = missingTools(['helm', 'envoy', 'jaeger']);
  if (missing) return [['(e) through the cluster edge', `skipped: ${missing}`]];
  const stack = await startStack({ port: 0, env: { ...process.env, ...opts.env } });
  try {
    const edgeUrl = `${stack.edgeUrl}/api/public/detect`;
    const load = (url: string, concurrency: number) =>
      runLoad({
        url,
        bodies: opts.bodies,
        contentType: 'image/jpeg',
        concurrency,
        seconds: opts.seconds / 2,
      });
    await load(edgeUrl, 2); // warm-up: connections, the detect workers
    const rounds = 2;
    const sum = { e8: 0, s8: 0, e8n: 0, s8n: 0, failures: 0 };
    // CPU per request at concurrency 8: on 2 cores saturated by inference, every CPU-millisecond the
    // edge spends per request is throughput lost.
    const stackPids = ON_THE_PATH.map((name) => stack.child(name).pid);
    const cpu = { embedded: 0, stack: ON_THE_PATH.map(() => 0) };
    const measured = async <T>(pids: number[], run: () => Promise<T>) => {
      const before = pids.map(cpuMs);
      const result = await run();
      return { result, cpu: pids.map((pid, i) => cpuMs(pid) - (before[i] as number)) };
    };
    const p50 = { e1: [] as number[], s1: [] as number[] };
    for (let round = 0; round < rounds; round++) {
      const { result: e8, cpu: eCpu } = await measured([opts.embeddedPid], () => load(opts.embeddedUrl, 8));
      const { result: s8, cpu: sCpu } = await measured(stackPids, () => load(edgeUrl, 8));
      cpu.embedded += eCpu[0] as number;
      sCpu.forEach((ms, i) => {
        cpu.stack[i] = (cpu.stack[i] as number) + ms;
      });
      const e1 = await load(opts.embeddedUrl, 1);
      const s1 = await load(edgeUrl, 1);
      sum.e8 += e8.requests;
      sum.e8n += e8.requests / e8.perSecond;
      sum.s8 += s8.requests;
      sum.s8n += s8.requests / s8.perSecond;
      sum.failures += s8.failures + s1.failures;
      p50.e1.push(e1.p50);
      p50.s1.push(s1.p50);
    }
    const embedded8 = sum.e8 / sum.e8n;
    const edge8 = sum.s8 / sum.s8n;
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    const perRequest = (ms: number, requests: number) => fmt(ms / requests, 2);
    const stackCpu = cpu.stack.reduce((a, b) => a + b, 0);
    const e1 = median(p50.e1);
    const s1 = median(p50.s1);
    return [
      ['(e) embedded, concurrency 8 (rounds beside the edge)', `${fmt(embedded8)} req/s`],
      [
        '(e) through Envoy (stack), concurrency 8',
        `${fmt(edge8)} req/s (${sum.s8} ok, ${sum.failures} failed)`,
      ],
      [
        '(e) through Envoy / embedded, req/s at concurrency 8',
        `${fmt((100 * edge8) / embedded8)} %  (target ≥ 90 %)`,
      ],
      [
        '(e) p50 at concurrency 1, embedded vs through Envoy',
        `${fmt(e1)} ms vs ${fmt(s1)} ms: +${fmt(s1 - e1, 2)} ms at the edge  (target ≤ 2 ms)`,
      ],
      [
        '(e) CPU ms per request at concurrency 8, embedded vs stack',
        `${perRequest(cpu.embedded, sum.e8)} vs ${perRequest(stackCpu, sum.s8)} (${ON_THE_PATH.map(
          (name, i) => `${name} ${perRequest(cpu.stack[i] as number, sum.s8)}`,
        ).join(', ')})`,
      ],
    ];
  } finally {
    await stack.stop();
  }
}
