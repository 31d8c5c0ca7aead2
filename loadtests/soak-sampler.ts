// Soak sampler: every INTERVAL_S (10 s) reads each detect pod's resident memory (RSS, the whole process
// with its scoring worker threads), V8 heap in use (the main thread's) and restart count, prints one line
// per sample, and at the end the slope of RSS and heap per pod over the samples after the warm-up
// (least squares, MiB per hour) — a leak shows as a steady upward slope. Run it beside steady traffic
// (loadtests/mixed.ts) on a cluster:
//
//   NAMESPACE=nsfwdetector DURATION_S=1800 WARMUP_S=300 npx tsx loadtests/soak-sampler.ts
//
// The figures are detect's own Prometheus metrics (nsfwdetector_process_resident_memory_bytes,
// nsfwdetector_nodejs_heap_size_used_bytes, nsfwdetector_process_start_time_seconds) from
// http://<pod IP>:<DETECT_PORT>/metrics. detect's NetworkPolicy admits only the gateway pods, so by
// default (VIA=exec) they are fetched from inside a gateway pod's quota container
// (`kubectl exec … -- node -e …`: nothing runs in the detect pods, whose memory is what is measured);
// VIA=direct fetches them from here (networkPolicy off, or this host in networkPolicy.metricsFrom).
//
// Env: NAMESPACE (default nsfwdetector), RELEASE (default nsfwdetector: the pods' instance label),
// KUBECTL (default: the tools cache's kubectl, else PATH), INTERVAL_S (10), DURATION_S (1800; 0: until
// Ctrl-C), WARMUP_S (120), VIA (exec | direct), DETECT_PORT (8080), SAMPLES_JSON (a file for every
// sample and the slopes), MAX_RSS_SLOPE_MIB_PER_HOUR and MAX_HEAP_SLOPE_MIB_PER_HOUR (when set, exit 1
// above them). Exits 1 as well when a detect container restarted or a pod was replaced.

import { execFile } from 'node:child_process';
import { accessSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);
const MiB = 1024 * 1024;

const METRICS = {
  rss: 'nsfwdetector_process_resident_memory_bytes',
  heap: 'nsfwdetector_nodejs_heap_size_used_bytes',
  start: 'nsfwdetector_process_start_time_seconds',
} as const;

export interface PodSample {
  pod: string;
  /** Seconds since the sampler started. */
  t: number;
  rssBytes: number;
  heapBytes: number;
  startTime: number;
  restarts: number;
}

/** The value of an unlabelled sample of `name` in Prometheus text, or NaN. */
export function metricValue(text: string, name: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) {
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return Number.NaN;
}

/** Least-squares slope of y over x (units of y per unit of x); NaN with fewer than two points. */
export function slope(points: Array<[number, number]>): number {
  if (points.length < 2) return Number.NaN;
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? Number.NaN : num / den;
}

// Run with `node -e` in a gateway pod's quota container (Node is there): the metrics of each address.
const FETCH_SCRIPT = `
const [port, ...ips] = process.argv.slice(1);
const names = ${JSON.stringify(Object.values(METRICS))};
Promise.all(ips.map(async (ip) => {
  try {
    const res = await fetch('http://' + ip + ':' + port + '/metrics', { signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    return [ip, text.split('\\n').filter((l) => names.some((n) => l.startsWith(n))).join('\\n')];
  } catch (err) { return [ip, '']; }
})).then((entries) => console.log(JSON.stringify(Object.fromEntries(entries))));
`;

interface Pod {
  name: string;
  ip: string;
  restarts: number;
  running: boolean;
}

export interface SamplerOptions {
  kubectl: string;
  /** A kubeconfig for kubectl (otherwise its own: KUBECONFIG, ~/.kube/config). */
  kubeconfig?: string;
  namespace: string;
  release: string;
  via: 'exec' | 'direct';
  port: number;
}

const kubeconfigArgs = (o: SamplerOptions) => (o.kubeconfig ? ['--kubeconfig', o.kubeconfig] : []);

async function kubectlJson(o: SamplerOptions, args: string[]): Promise<{ items: unknown[] }> {
  const { stdout } = await execFileAsync(
    o.kubectl,
    [...kubeconfigArgs(o), '-n', o.namespace, ...args, '-o', 'json'],
    {
      maxBuffer: 16 * MiB,
    },
  );
  return JSON.parse(stdout);
}

// biome-ignore lint/suspicious/noExplicitAny: reading a few fields of Kubernetes' pod JSON
function podOf(item: any, container: string): Pod {
  const status = item.status?.containerStatuses?.find((c: { name: string }) => c.name === container);
  return {
    name: item.metadata.name,
    ip: item.status?.podIP ?? '',
    restarts: status?.restartCount ?? 0,
    running: item.status?.phase === 'Running' && Boolean(status?.ready),
  };
}

async function pods(o: SamplerOptions, component: string): Promise<Pod[]> {
  const list = await kubectlJson(o, [
    'get',
    'pods',
    '-l',
    `app.kubernetes.io/instance=${o.release},app.kubernetes.io/component=${component}`,
  ]);
  return list.items.map((item) => podOf(item, component === 'gateway' ? 'quota' : component));
}

async function metricsOf(o: SamplerOptions, ips: string[]): Promise<Record<string, string>> {
  if (o.via === 'direct') {
    const entries = await Promise.all(
      ips.map(async (ip) => {
        try {
          const res = await fetch(`http://${ip}:${o.port}/metrics`, { signal: AbortSignal.timeout(5000) });
          return [ip, await res.text()] as const;
        } catch {
          return [ip, ''] as const;
        }
      }),
    );
    return Object.fromEntries(entries);
  }
  const gateway = (await pods(o, 'gateway')).find((p) => p.running);
  if (!gateway) throw new Error('no running gateway pod to read detect metrics from (VIA=exec)');
  const { stdout } = await execFileAsync(
    o.kubectl,
    [
      ...kubeconfigArgs(o),
      '-n',
      o.namespace,
      'exec',
      gateway.name,
      '-c',
      'quota',
      '--',
      'node',
      '-e',
      FETCH_SCRIPT,
      String(o.port),
      ...ips,
    ],
    { maxBuffer: 16 * MiB },
  );
  return JSON.parse(stdout);
}

export interface SoakReport {
  samples: PodSample[];
  perPod: Array<{
    pod: string;
    samples: number;
    rssSlopeMiBPerHour: number;
    heapSlopeMiBPerHour: number;
    rssMiB: [number, number];
    heapMiB: [number, number];
    restarts: number;
  }>;
  /** Pods that appeared or went during the run (a replacement is a restart too). */
  podsChanged: boolean;
}

export async function soak(opts: {
  sampler: SamplerOptions;
  intervalS: number;
  durationS: number;
  warmupS: number;
  onLine?: (line: string) => void;
  stopped?: () => boolean;
}): Promise<SoakReport> {
  const samples: PodSample[] = [];
  const began = Date.now();
  const seen = new Set<string>();
  let firstSet: string | undefined;
  let podsChanged = false;
  for (let next = began; ; next += opts.intervalS * 1000) {
    const t = (Date.now() - began) / 1000;
    const detect = (await pods(opts.sampler, 'detect')).filter((p) => p.ip);
    const set = detect
      .map((p) => p.name)
      .sort()
      .join(',');
    firstSet ??= set;
    if (set !== firstSet) podsChanged = true;
    const metrics = await metricsOf(
      opts.sampler,
      detect.map((p) => p.ip),
    );
    const parts: string[] = [];
    for (const p of detect) {
      seen.add(p.name);
      const text = metrics[p.ip] ?? '';
      const sample: PodSample = {
        pod: p.name,
        t,
        rssBytes: metricValue(text, METRICS.rss),
        heapBytes: metricValue(text, METRICS.heap),
        startTime: metricValue(text, METRICS.start),
        restarts: p.restarts,
      };
      samples.push(sample);
      parts.push(
        `${p.name} rss=${(sample.rssBytes / MiB).toFixed(1)}MiB heap=${(sample.heapBytes / MiB).toFixed(1)}MiB restarts=${p.restarts}`,
      );
    }
    opts.onLine?.(`${t.toFixed(0).padStart(6)}s  ${parts.join('  |  ') || '(no detect pod)'}`);
    if ((opts.durationS > 0 && t >= opts.durationS) || opts.stopped?.()) break;
    await sleep(Math.max(0, next + opts.intervalS * 1000 - Date.now()));
  }
  const perPod = [...seen].map((pod) => {
    const mine = samples.filter((s) => s.pod === pod);
    const after = mine.filter((s) => s.t >= opts.warmupS && Number.isFinite(s.rssBytes));
    const hours = (s: PodSample) => s.t / 3600;
    const firstAfter = after[0];
    const last = after.at(-1);
    return {
      pod,
      samples: after.length,
      rssSlopeMiBPerHour: slope(after.map((s) => [hours(s), s.rssBytes / MiB])),
      heapSlopeMiBPerHour: slope(after.map((s) => [hours(s), s.heapBytes / MiB])),
      rssMiB: [(firstAfter?.rssBytes ?? Number.NaN) / MiB, (last?.rssBytes ?? Number.NaN) / MiB] as [
        number,
        number,
      ],
      heapMiB: [(firstAfter?.heapBytes ?? Number.NaN) / MiB, (last?.heapBytes ?? Number.NaN) / MiB] as [
        number,
        number,
      ],
      // A container restart counts up; a new process in the same pod shows a new start time too.
      restarts: Math.max(
        (mine.at(-1)?.restarts ?? 0) - (mine[0]?.restarts ?? 0),
        new Set(mine.map((s) => s.startTime).filter(Number.isFinite)).size - 1,
      ),
    };
  });
  return { samples, perPod, podsChanged };
}

function findKubectl(): string {
  if (process.env.KUBECTL) return process.env.KUBECTL;
  const cached = `${process.env.HOME}/.cache/nsfwdetector-tools/bin/kubectl`;
  try {
    accessSync(cached);
    return cached;
  } catch {
    return 'kubectl';
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const num = (name: string, fallback: number) => {
    const v = Number(process.env[name] ?? fallback);
    if (!Number.isFinite(v) || v < 0) {
      console.error(`${name} must be a number ≥ 0 (got ${process.env[name]})`);
      process.exit(2);
    }
    return v;
  };
  const via = process.env.VIA ?? 'exec';
  if (via !== 'exec' && via !== 'direct') {
    console.error(`VIA must be exec or direct (got ${via})`);
    process.exit(2);
  }
  const sampler: SamplerOptions = {
    kubectl: findKubectl(),
    namespace: process.env.NAMESPACE ?? 'nsfwdetector',
    release: process.env.RELEASE ?? 'nsfwdetector',
    via,
    port: num('DETECT_PORT', 8080),
  };
  const intervalS = num('INTERVAL_S', 10);
  const durationS = num('DURATION_S', 1800);
  const warmupS = num('WARMUP_S', 120);
  let stop = false;
  process.once('SIGINT', () => {
    stop = true;
  });
  console.log(
    `soak sampler: detect pods of ${sampler.release} in ${sampler.namespace}, every ${intervalS} s for ${durationS || '∞'} s, warm-up ${warmupS} s`,
  );
  const report = await soak({
    sampler,
    intervalS,
    durationS,
    warmupS,
    onLine: (l) => console.log(l),
    stopped: () => stop,
  });
  let failed = report.podsChanged;
  if (report.podsChanged) console.log('detect pods changed during the run (a pod was replaced)');
  const maxRss = process.env.MAX_RSS_SLOPE_MIB_PER_HOUR
    ? Number(process.env.MAX_RSS_SLOPE_MIB_PER_HOUR)
    : undefined;
  const maxHeap = process.env.MAX_HEAP_SLOPE_MIB_PER_HOUR
    ? Number(process.env.MAX_HEAP_SLOPE_MIB_PER_HOUR)
    : undefined;
  for (const p of report.perPod) {
    console.log(
      `${p.pod}: after warm-up ${p.samples} samples; RSS ${p.rssMiB[0].toFixed(1)} → ${p.rssMiB[1].toFixed(1)} MiB, ` +
        `slope ${p.rssSlopeMiBPerHour.toFixed(2)} MiB/h; heap ${p.heapMiB[0].toFixed(1)} → ${p.heapMiB[1].toFixed(1)} MiB, ` +
        `slope ${p.heapSlopeMiBPerHour.toFixed(2)} MiB/h; restarts ${p.restarts}`,
    );
    if (p.restarts > 0) failed = true;
    if (maxRss !== undefined && !(p.rssSlopeMiBPerHour <= maxRss)) failed = true;
    if (maxHeap !== undefined && !(p.heapSlopeMiBPerHour <= maxHeap)) failed = true;
  }
  if (process.env.SAMPLES_JSON) writeFileSync(process.env.SAMPLES_JSON, JSON.stringify(report));
  process.exit(failed ? 1 : 0);
}
