// authorize() overhead against a real redis-server, at a fixed OPEN-LOOP rate (requests are started on
// a schedule, whatever the previous ones are doing; not a closed loop that waits for each answer).
// Measured on the key path (resolve the key + consume the account quota: two Redis scripts), in
// process and over the ext_authz HTTP transport (a real quota server process, called as Envoy does).
// `authorizeBench()` starts and stops its own redis-server; `npx tsx bench/authorize.ts` runs it alone.

import { execFileSync } from 'node:child_process';
import { Agent, request } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { loadConfig } from '../services/common/config.ts';
import { createAuthorizer } from '../services/quota/app.ts';
import { openStores } from '../services/quota/stores/open-stores.ts';
import { startQuotaServer } from '../test/support/quota-process.ts';
import { RedisServer, redisServerPath } from '../test/support/redis-server.ts';

const RATE = Number(process.env.BENCH_AUTHORIZE_RATE ?? 2000);
const SECONDS = Number(process.env.BENCH_AUTHORIZE_SECONDS ?? 5);
// Long enough to pass V8's tier-up: some 5 s into a fresh process's load both the server and this
// client compile their hot paths on helper threads at once, and on 2 cores the requests of that
// moment wait tens of ms (p99 ~20-110 ms over a 5 s window that holds it, ~1.7 ms after it). The
// warm-up's own figures are printed, so the transient stays visible.
const WARMUP_SECONDS = Number(process.env.BENCH_AUTHORIZE_WARMUP_SECONDS ?? 8);
// Limits far above what the run sends: every request takes the full path (no early refusal).
const HIGH = { PRO_PER_MINUTE: '100000000', PRO_PER_DAY: '100000000' };

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

export async function authorizeBench(): Promise<string[]> {
  if (!redisServerPath()) {
    return ['authorize(): skipped, redis-server is not installed (apt-get install redis-server)'];
  }
  const version = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)?.[1];
  const loadBefore = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const redis = await RedisServer.start();
  const lines = [
    `authorize() on real Redis ${version ?? ''} (key path: resolve key + consume quota), open loop ${RATE} req/s × ${SECONDS} s after ${WARMUP_SECONDS} s warm-up:`,
  ];
  const config = loadConfig({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'bench:', ...HIGH });
  const stores = await openStores(config, { required: true, clientName: 'bench' });
  try {
    const account = await stores.accountStore.createAccount({ email: 'bench@example.com', tier: 'pro' });
    const key = await stores.accountStore.createKey(account.id);
    const authorization = `Bearer ${key?.secret}`;

    // In process: the embedded transport (the detect plugin's onRequest calls exactly this).
    const authorizer = createAuthorizer({ config, ...stores }, console);
    const inProcess = async () =>
      (await authorizer.authorize({ endpoint: 'open', clientIp: '127.0.0.1', authorization })).allowed;
    const inProcessWarmup = await openLoop(RATE, WARMUP_SECONDS, inProcess);
    lines.push(describeRun('in process', await openLoop(RATE, SECONDS, inProcess)));

    // Over ext_authz HTTP: a real quota server process, keep-alive connections, as Envoy calls it.
    const server = await startQuotaServer({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'bench:', ...HIGH });
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
    // The same server's liveness route: the cost of the HTTP round trip alone, without authorize().
    const floor = overHttp('GET', '/internal/live', {});
    try {
      const extAuthzWarmup = await openLoop(RATE, WARMUP_SECONDS, check);
      lines.push(describeRun('ext_authz HTTP', await openLoop(RATE, SECONDS, check)));
      lines.push(describeRun('HTTP floor', await openLoop(RATE, SECONDS, floor)));
      lines.push(
        describeRun('in proc, warm-up', inProcessWarmup),
        describeRun('ext_authz, warm-up', extAuthzWarmup),
      );
    } finally {
      agent.destroy();
      await server.stop();
    }
    lines.push(
      '  target: p99 ≤ 2 ms. Service time = from the call to its answer; "from schedule" adds timer lateness;',
      '  "HTTP floor" = GET /internal/live on the same quota server: the HTTP round trip without authorize().',
      `  "warm-up" = the first ${WARMUP_SECONDS} s (fresh process, V8 still compiling): not counted in the target.`,
      `  machine: ${cpus().length} cores, load average before the run ${loadBefore}`,
    );
  } finally {
    await stores.close();
    await redis.stop();
  }
  return lines;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const line of await authorizeBench()) console.log(line);
}
