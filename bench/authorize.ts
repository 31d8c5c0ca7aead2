// authorize() overhead against real Redis in each topology (one redis-server; Sentinel: 1 primary, 2
// replicas, 3 sentinels; Cluster: 3 primaries, 3 replicas), at a fixed OPEN-LOOP rate (requests are
// started on a schedule, whatever the previous ones are doing; not a closed loop that waits for each
// answer). Measured on the key path (one Redis round trip; two in a Cluster), in process and over the
// ext_authz HTTP transport (a real quota server process, called as Envoy does), then the anonymous
// path over HTTP. Around the HTTP runs the primaries' INFO commandstats and CPU give the Redis
// commands and Redis CPU per request, and from them the request rate one shard carries at 50 % CPU.
// `authorizeBench()` starts and stops its own servers; `npx tsx bench/authorize.ts` runs it alone
// (BENCH_AUTHORIZE_TOPOLOGIES=single,cluster to choose).

import { execFileSync } from 'node:child_process';
import { Agent, request } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { createAuthorizer } from '../services/quota/app.ts';
import { loadQuotaConfig } from '../services/quota/config.ts';
import { openStores } from '../services/quota/stores/open-stores.ts';
import { startQuotaServer } from '../test/support/quota-process.ts';
import {
  ask,
  clusterPrimaries,
  currentPrimary,
  type RedisTopology,
  startTopology,
  TOPOLOGY_KINDS,
  type TopologyKind,
} from '../test/support/redis-topology.ts';
import { REDIS_SERVER } from '../test/support/tools.ts';

const RATE = Number(process.env.BENCH_AUTHORIZE_RATE ?? 2000);
const SECONDS = Number(process.env.BENCH_AUTHORIZE_SECONDS ?? 5);
// Long enough to pass V8's tier-up: some 5 s into a fresh process's load both the server and this
// client compile their hot paths on helper threads at once, and on 2 cores the requests of that
// moment wait tens of ms (p99 ~20-110 ms over a 5 s window that holds it, ~1.7 ms after it). The
// warm-up's own figures are printed, so the transient stays visible.
const WARMUP_SECONDS = Number(process.env.BENCH_AUTHORIZE_WARMUP_SECONDS ?? 8);
// Limits far above what the run sends: every request takes the full path (no early refusal).
const HIGH = {
  PRO_PER_MINUTE: '100000000',
  PRO_PER_DAY: '100000000',
  ANON_PER_MINUTE: '100000000',
  ANON_PER_DAY: '100000000',
};
const TOPOLOGIES = (process.env.BENCH_AUTHORIZE_TOPOLOGIES?.split(',') ?? TOPOLOGY_KINDS).filter(
  (k): k is TopologyKind => (TOPOLOGY_KINDS as readonly string[]).includes(k),
);

interface Run {
  /** From the call to its answer: the overhead a request pays. */
  service: number[];
  /** From the scheduled start to the answer: includes any queueing behind earlier requests. */
  scheduled: number[];
  errors: number;
  achievedRate: number;
}

/** Starts `rate` calls per second for `seconds`, on schedule, and waits for all of them. */
async function openLoop(rate: number, seconds: number, call: () => Promise<boolean>): Promise<Run> {
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const service: number[] = [];
  const scheduled: number[] = [];
  let errors = 0;
  let started = 0;
  const inflight: Promise<void>[] = [];
  const t0 = performance.now() + 5;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (started < total && t0 + started * interval <= now) {
        const due = t0 + started * interval;
        started += 1;
        const begin = performance.now();
        inflight.push(
          call().then(
            (ok) => {
              const end = performance.now();
              service.push(end - begin);
              scheduled.push(end - due);
              if (!ok) errors += 1;
            },
            () => {
              errors += 1;
            },
          ),
        );
      }
      // A timer (≈1 ms granularity), not a busy loop: the machine is shared with the process measured.
      if (started < total) setTimeout(tick, Math.max(0, t0 + started * interval - performance.now() - 0.5));
      else resolve();
    };
    tick();
  });
  await Promise.all(inflight);
  const elapsed = (performance.now() - t0) / 1000;
  return { service, scheduled, errors, achievedRate: total / elapsed };
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

function describeRun(label: string, run: Run): string {
  const s = [...run.service].sort((a, b) => a - b);
  const q = [...run.scheduled].sort((a, b) => a - b);
  const f = (x: number) => x.toFixed(2);
  return (
    `  ${label.padEnd(18)} p50 ${f(pct(s, 50))} ms  p99 ${f(pct(s, 99))} ms  max ${f(s.at(-1) ?? Number.NaN)} ms` +
    `  | from schedule: p50 ${f(pct(q, 50))} ms  p99 ${f(pct(q, 99))} ms` +
    `  | ${run.service.length} requests at ${run.achievedRate.toFixed(0)} req/s, ${run.errors} errors`
  );
}

/** Commands run (those inside scripts included), scripts run and CPU seconds used by the primaries. */
interface RedisWork {
  commands: number;
  scripts: number;
  cpuSeconds: number;
}

/** The bench's and the topology's own traffic (readiness, replication, cluster bus), not a request's. */
const NOT_REQUESTS = new Set([
  'info',
  'ping',
  'cluster',
  'role',
  'replconf',
  'psync',
  'client',
  'command',
  'select',
  'publish',
  'subscribe',
  'hello',
  'auth',
]);

async function primaries(topology: RedisTopology): Promise<number[]> {
  return topology.kind === 'cluster' ? clusterPrimaries(topology.nodes) : [await currentPrimary(topology)];
}

async function redisWork(ports: number[]): Promise<RedisWork> {
  let commands = 0;
  let scripts = 0;
  let cpuSeconds = 0;
  for (const port of ports) {
    const stats = String(await ask(port, ['INFO', 'commandstats']));
    for (const m of stats.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
      const name = String(m[1]).split('|')[0] as string;
      if (NOT_REQUESTS.has(name)) continue;
      commands += Number(m[2]);
      if (name === 'evalsha' || name === 'eval') scripts += Number(m[2]);
    }
    const cpu = String(await ask(port, ['INFO', 'cpu']));
    cpuSeconds +=
      Number(/used_cpu_sys:([\d.]+)/.exec(cpu)?.[1]) + Number(/used_cpu_user:([\d.]+)/.exec(cpu)?.[1]);
  }
  return { commands, scripts, cpuSeconds };
}

interface PathCost {
  commandsPerRequest: number;
  scriptsPerRequest: number;
  cpuMsPerRequest: number;
}

async function measured(ports: number[], run: () => Promise<Run>): Promise<{ run: Run; cost: PathCost }> {
  const before = await redisWork(ports);
  const result = await run();
  const after = await redisWork(ports);
  const n = result.service.length;
  return {
    run: result,
    cost: {
      commandsPerRequest: (after.commands - before.commands) / n,
      scriptsPerRequest: (after.scripts - before.scripts) / n,
      cpuMsPerRequest: ((after.cpuSeconds - before.cpuSeconds) * 1000) / n,
    },
  };
}

interface ModeFigures {
  kind: TopologyKind;
  inProcess: Run;
  keyPath: Run;
  keyCost: PathCost;
  anonCost: PathCost;
}

function p(run: Run, q: number): string {
  return pct(
    [...run.service].sort((a, b) => a - b),
    q,
  ).toFixed(2);
}

async function benchOn(topology: RedisTopology, lines: string[], withFloor: boolean): Promise<ModeFigures> {
  const env = { ...topology.env, REDIS_KEY_PREFIX: 'bench:', ...HIGH };
  const config = loadQuotaConfig(env);
  const stores = await openStores(config, { required: true, clientName: 'bench' });
  lines.push(`${topology.kind}:`);
  try {
    // The account and key wait for a replica's acknowledgement; on a busy machine that can take longer
    // than the request path's bound, so they are written through stores with a looser one.
    const setup = await openStores(loadQuotaConfig({ ...env, REDIS_COMMAND_TIMEOUT_MS: '2000' }), {
      required: true,
      clientName: 'bench-setup',
    });
    const account = await setup.accountStore.createAccount({ email: 'bench@example.com', tier: 'pro' });
    const key = await setup.accountStore.createKey(account.id);
    await setup.close();
    const authorization = `Bearer ${key?.secret}`;

    // In process: the embedded transport (the detect plugin's onRequest calls exactly this).
    const authorizer = createAuthorizer({ config, ...stores }, console);
    const inProcess = async () =>
      (await authorizer.authorize({ endpoint: 'open', clientIp: '127.0.0.1', authorization })).allowed;
    const inProcessWarmup = await openLoop(RATE, WARMUP_SECONDS, inProcess);
    const inProcessRun = await openLoop(RATE, SECONDS, inProcess);
    lines.push(describeRun('in process', inProcessRun));

    // Over ext_authz HTTP: a real quota server process, keep-alive connections, as Envoy calls it.
    const server = await startQuotaServer(env);
    const agent = new Agent({ keepAlive: true, maxSockets: 64 });
    const overHttp = (method: string, path: string, headers: Record<string, string>) => () =>
      new Promise<boolean>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: server.port, method, path, headers, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode === 200));
        });
        req.on('error', reject);
        req.setNoDelay(true);
        req.end();
      });
    const check = overHttp('POST', '/ext_authz/api/open/detect', { authorization, 'content-length': '0' });
    const anonymous = overHttp('POST', '/ext_authz/api/public/detect', { 'content-length': '0' });
    // The same server's liveness route: the cost of the HTTP round trip alone, without authorize().
    const floor = overHttp('GET', '/internal/live', {});
    try {
      const ports = await primaries(topology);
      const extAuthzWarmup = await openLoop(RATE, WARMUP_SECONDS, check);
      const keyPath = await measured(ports, () => openLoop(RATE, SECONDS, check));
      lines.push(describeRun('ext_authz HTTP', keyPath.run));
      const anon = await measured(ports, () => openLoop(RATE, SECONDS, anonymous));
      lines.push(describeRun('ext_authz anonymous', anon.run));
      if (withFloor) lines.push(describeRun('HTTP floor', await openLoop(RATE, SECONDS, floor)));
      lines.push(
        describeRun('in proc, warm-up', inProcessWarmup),
        describeRun('ext_authz, warm-up', extAuthzWarmup),
      );
      return {
        kind: topology.kind,
        inProcess: inProcessRun,
        keyPath: keyPath.run,
        keyCost: keyPath.cost,
        anonCost: anon.cost,
      };
    } finally {
      agent.destroy();
      await server.stop();
    }
  } finally {
    await stores.close();
  }
}

export async function authorizeBench(): Promise<string[]> {
  const redisServer = REDIS_SERVER.find();
  if (redisServer === undefined)
    return [`authorize(): skipped, redis-server is not installed (install: ${REDIS_SERVER.install})`];
  const version = execFileSync(redisServer, ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1];
  const loadBefore = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const lines = [
    `authorize() on real Redis ${version ?? ''} (key path: resolve key + consume quota), open loop ${RATE} req/s × ${SECONDS} s after ${WARMUP_SECONDS} s warm-up, per topology:`,
  ];
  const figures: ModeFigures[] = [];
  for (const kind of TOPOLOGIES) {
    const topology = await startTopology(kind);
    try {
      figures.push(await benchOn(topology, lines, kind === TOPOLOGIES[0]));
    } finally {
      await topology.stop();
    }
  }
  const f2 = (x: number) => x.toFixed(2);
  lines.push(
    '  side by side (service time, ms)   in process p50 / p99   ext_authz p50 / p99   Redis commands (scripts) per request, key / anonymous   Redis CPU per request, µs (key / anonymous)',
    ...figures.map(
      (m) =>
        `  ${m.kind.padEnd(34)}${`${p(m.inProcess, 50)} / ${p(m.inProcess, 99)}`.padEnd(23)}${`${p(m.keyPath, 50)} / ${p(m.keyPath, 99)}`.padEnd(22)}${`${f2(m.keyCost.commandsPerRequest)} (${f2(m.keyCost.scriptsPerRequest)}) / ${f2(m.anonCost.commandsPerRequest)} (${f2(m.anonCost.scriptsPerRequest)})`.padEnd(56)}${(m.keyCost.cpuMsPerRequest * 1000).toFixed(1)} / ${(m.anonCost.cpuMsPerRequest * 1000).toFixed(1)}`,
    ),
  );
  const single = figures.find((m) => m.kind === 'single') ?? figures[0];
  if (single) {
    // One Redis primary is single-threaded: 50 % of one core is 500 ms of CPU a second.
    const perShard = (cost: PathCost) => 500 / cost.cpuMsPerRequest;
    const key = perShard(single.keyCost);
    const anon = perShard(single.anonCost);
    const shards = (rate: number, per: number) => Math.ceil(rate / per);
    lines.push(
      `  one shard at 50 % CPU (${single.kind} figures): ${key.toFixed(0)} key requests/s or ${anon.toFixed(0)} anonymous requests/s;` +
        ` 10k detect req/s → ${shards(10_000, key)} shard(s) (key) / ${shards(10_000, anon)} (anonymous); 100k → ${shards(100_000, key)} / ${shards(100_000, anon)}`,
    );
  }
  lines.push(
    '  target: p99 ≤ 2 ms. Service time = from the call to its answer; "from schedule" adds timer lateness;',
    '  "HTTP floor" = GET /internal/live on the same quota server: the HTTP round trip without authorize().',
    `  "warm-up" = the first ${WARMUP_SECONDS} s (fresh process, V8 still compiling): not counted in the target.`,
    '  Redis CPU: used_cpu_sys + used_cpu_user of the primaries (INFO cpu) over the measured run, per request; the',
    '  load generator, the quota server and Redis share this machine, so it is an upper bound of a dedicated core.',
    `  machine: ${cpus().length} cores, load average before the run ${loadBefore}`,
  );
  return lines;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const line of await authorizeBench()) console.log(line);
}
