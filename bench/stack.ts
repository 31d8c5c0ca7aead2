// The cost of the edge: the same detect load through the cluster stack (Envoy → ext_authz to the
// quota service on Redis → detect) beside the embedded process (`npm start`), in alternating rounds of
// the same run (this VM's speed drifts over tens of seconds). The stack runs as `npm run stack` does,
// once with tracing off (the edge alone: Envoy, ext_authz, Redis) and once with every request traced
// (Envoy samples all; the services export their spans to Jaeger).

import { readFileSync } from 'node:fs';
import { type ChildName, startStack } from '../tools/stack/stack.ts';
import { missingTools } from '../tools/stack/tools.ts';
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

/** One tracing setting of the stack: Envoy samples this share, the services follow (parent-based). */
interface TracingMode {
  label: string;
  traceSampleRatio: string;
}

const MODES: TracingMode[] = [
  { label: 'tracing off', traceSampleRatio: '0' },
  { label: 'every request traced', traceSampleRatio: '1' },
];
const ROUNDS = 5;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

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
  const lines: Array<[string, string]> = [];
  for (const mode of MODES) lines.push(...(await figuresFor(mode, opts)));
  return lines;
}

/**
 * The stack started with one tracing mode; ROUNDS rounds, each: embedded then edge at concurrency 8
 * (CPU per request of every process on the path), then embedded then edge at concurrency 1 (p50).
 * Medians over the rounds.
 */
async function figuresFor(
  mode: TracingMode,
  opts: Parameters<typeof stackFigures>[0],
): Promise<Array<[string, string]>> {
  const stack = await startStack({
    port: 0,
    env: { ...process.env, ...opts.env, TRACE_SAMPLE_RATIO: mode.traceSampleRatio },
  });
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
    const stackPids = ON_THE_PATH.map((name) => stack.child(name).pid);
    const measured = async <T>(pids: number[], run: () => Promise<T>) => {
      const before = pids.map(cpuMs);
      const result = await run();
      return { result, cpu: pids.map((pid, i) => cpuMs(pid) - (before[i] as number)) };
    };
    const per = { e8: [] as number[], s8: [] as number[], e1: [] as number[], s1: [] as number[] };
    const ratios: number[] = [];
    const cpuEmbedded: number[] = [];
    const cpuStack: number[][] = ON_THE_PATH.map(() => []);
    let failures = 0;
    let served = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const { result: e8, cpu: eCpu } = await measured([opts.embeddedPid], () => load(opts.embeddedUrl, 8));
      const { result: s8, cpu: sCpu } = await measured(stackPids, () => load(edgeUrl, 8));
      const e1 = await load(opts.embeddedUrl, 1);
      const s1 = await load(edgeUrl, 1);
      per.e8.push(e8.perSecond);
      per.s8.push(s8.perSecond);
      ratios.push(s8.perSecond / e8.perSecond);
      per.e1.push(e1.p50);
      per.s1.push(s1.p50);
      cpuEmbedded.push((eCpu[0] as number) / e8.requests);
      sCpu.forEach((ms, i) => {
        cpuStack[i]?.push(ms / s8.requests);
      });
      failures += s8.failures + s1.failures + e8.failures + e1.failures;
      served += s8.requests + s1.requests;
    }
    const stackCpu = cpuStack.map(median);
    const e1 = median(per.e1);
    const s1 = median(per.s1);
    const added = per.s1.map((s, i) => s - (per.e1[i] as number));
    const tag = `(e, ${mode.label})`;
    return [
      [
        `${tag} req/s at concurrency 8, embedded vs through Envoy`,
        `${fmt(median(per.e8))} vs ${fmt(median(per.s8))} (${served} served through Envoy, ${failures} failed)`,
      ],
      [
        `${tag} through Envoy / embedded at concurrency 8`,
        `${fmt(100 * median(ratios))} %  (target ≥ 90 %; rounds ${ratios.map((r) => fmt(100 * r)).join(', ')} %)`,
      ],
      [
        `${tag} p50 at concurrency 1, embedded vs through Envoy`,
        `${fmt(e1)} ms vs ${fmt(s1)} ms: +${fmt(median(added), 2)} ms at the edge, median of the rounds' paired differences (target ≤ 2 ms; rounds ${added
          .map((d) => `${d >= 0 ? '+' : ''}${fmt(d)}`)
          .join(', ')} ms; difference of the medians ${fmt(s1 - e1, 2)} ms)`,
      ],
      [
        `${tag} CPU ms per request at concurrency 8, embedded vs stack`,
        `${fmt(median(cpuEmbedded), 2)} vs ${fmt(
          stackCpu.reduce((a, b) => a + b, 0),
          2,
        )} (${ON_THE_PATH.map((name, i) => `${name} ${fmt(stackCpu[i] as number, 2)}`).join(', ')})`,
      ],
    ];
  } finally {
    await stack.stop();
  }
}
