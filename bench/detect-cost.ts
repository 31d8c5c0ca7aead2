// `npx tsx bench/detect-cost.ts [options] [variant ...]`: what one ~1 MP detect request costs the server
// process, measured from the outside: CPU time per request (utime + stime of the whole process, every
// thread included, from /proc/<pid>/stat before and after the load), req/s, p50, peak RSS while the load
// runs (VmRSS sampled every 10 ms) and RSS at idle after it.
//
// The server runs as production runs it: `node dist/services/all-in-one/server.js` (the image's CMD and
// `npm start`; build first with `npm run build`). `@tsx` runs the source through tsx instead, as the tests do.
// Variants are interleaved round by round (the machine is shared: conditions drift over a minute), and a
// fresh server is started for every variant in every round.
//
//   variant := name[@dist|@tsx|@<dir holding a built services/>][:VAR=value,VAR=value] (VAR= unsets)
//   Every server runs as npm start and the image run node (lib/common/node-runtime.ts: MALLOC_ARENA_MAX=2,
//   --max-semi-space-size=1); `NODE_FLAGS=…` in a variant replaces the node flags.
//   options: --seconds N (per concurrency, default 6), --rounds N (default 2), --uploads (also 8
//            concurrent ~49 MB PNG uploads: peak RSS), --concurrency 1,8 (default), --threads (CPU per
//            request split by thread name: MainThread, WorkerThread = scoring workers with their ONNX
//            threads, libvips worker, libuv-worker, V8Worker = garbage collection helpers)
// Example: npx tsx bench/detect-cost.ts base 'w1:SCORING_WORKERS=1' 'src@tsx'
// To compare builds, copy dist/ before a change to .bench-dist/<name> (inside the checkout, so that its
// imports find node_modules; git and Biome ignore it) and name it: 'before@.bench-dist/<name>'.

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../lib/common/node-runtime.ts';
import { type Child, spawnChild } from '../test/support/children.ts';
import { listeningPort, ROOT } from '../test/support/server-process.ts';
import { closeLoadConnections, postOnce, runLoad } from './http-load.ts';
import { benchImages, largePng } from './images.ts';

interface Variant {
  name: string;
  /** 'tsx' (source), or a directory holding the built services/ (dist). */
  runner: 'tsx' | string;
  env: Record<string, string>;
}

function parseArgs(argv: string[]) {
  const opts = {
    seconds: 6,
    rounds: 2,
    uploads: false,
    threads: false,
    concurrency: [1, 8],
    variants: [] as Variant[],
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--seconds') opts.seconds = Number(argv[++i]);
    else if (arg === '--rounds') opts.rounds = Number(argv[++i]);
    else if (arg === '--uploads') opts.uploads = true;
    else if (arg === '--threads') opts.threads = true;
    else if (arg === '--concurrency') opts.concurrency = String(argv[++i]).split(',').map(Number);
    else opts.variants.push(parseVariant(arg));
  }
  if (opts.variants.length === 0) opts.variants.push(parseVariant('dist'));
  return opts;
}

function parseVariant(spec: string): Variant {
  const colon = spec.indexOf(':');
  const head = colon < 0 ? spec : spec.slice(0, colon);
  const [name, runner = 'dist'] = head.split('@') as [string, string?];
  const env: Record<string, string> = {};
  if (colon >= 0) {
    for (const pair of spec
      .slice(colon + 1)
      .split(',')
      .filter(Boolean)) {
      const eq = pair.indexOf('=');
      env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
  }
  const dir = runner === 'tsx' ? 'tsx' : isAbsolute(runner) ? runner : join(ROOT, runner);
  return { name, runner: dir, env };
}

const CLK_TCK = 100; // Linux USER_HZ
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state): utime is field 14, stime field 15 (whole process, all threads).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}
/** CPU ms of each thread, by thread name (comm) and id: where the process's time goes. */
function threadCpu(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'latin1');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(`${comm}#${tid}`, ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK);
    } catch {
      // the thread ended
    }
  }
  return out;
}
function rssMiB(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'))?.[1]);
  return kb / 1024;
}

async function start(v: Variant): Promise<{ child: Child; url: string }> {
  // As npm start and the image run node (lib/common/node-runtime.ts); `NODE_FLAGS=<flags>` in a
  // variant replaces the flags (space-separated; empty: none).
  const flags =
    v.env.NODE_FLAGS === undefined ? PRODUCTION_NODE_FLAGS : v.env.NODE_FLAGS.split(' ').filter(Boolean);
  const args = [
    ...flags,
    ...(v.runner === 'tsx'
      ? ['--import', 'tsx', 'services/all-in-one/server.ts']
      : [join(v.runner, 'services/all-in-one/server.js')]),
  ];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TSX_DISABLE_CACHE: '1',
    ...PRODUCTION_ENV,
    HOST: '127.0.0.1',
    PORT: '0',
    ANON_PER_MINUTE: '1000000',
    ANON_PER_DAY: '1000000',
    ACCOUNTS_FILE: join(accountsDir, 'accounts.json'),
    ...v.env,
  };
  // `VAR=` in a variant removes VAR (e.g. `MALLOC_ARENA_MAX=`: glibc's default).
  for (const [k, value] of Object.entries(v.env)) if (value === '') delete env[k];
  delete env.NODE_FLAGS;
  const child = spawnChild(v.name, process.execPath, args, { cwd: ROOT, env });
  try {
    const port = await listeningPort(child).catch((err: Error) => {
      throw new Error(`${err.message}:\n${child.output()}`);
    });
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      const status = await fetch(`${url}/internal/ready`).then(
        (r) => r.status,
        () => 0,
      );
      if (status === 200) break;
      if (!child.running() || i > 1200) throw new Error(`${v.name} not ready:\n${child.output()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return { child, url: `${url}/api/public/detect` };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

interface Figures {
  cpuMsPerReq: number;
  perSecond: number;
  p50: number;
  peakRss: number;
  failures: number;
}

const opts = parseArgs(process.argv.slice(2));
const accountsDir = mkdtempSync(join(tmpdir(), 'detect-cost-'));
process.on('exit', () => rmSync(accountsDir, { recursive: true, force: true }));
const images = await benchImages();
const bodies = images.map((i) => i.jpeg);
const big = opts.uploads ? await largePng() : undefined;
type Row = { startRss: number; idleRss: number; uploadPeak?: number; byC: Map<number, Figures> };
const rows = new Map<string, Row[]>();

for (let round = 1; round <= opts.rounds; round++) {
  for (const v of opts.variants) {
    const { child, url } = await start(v);
    const pid = child.pid;
    try {
      const startRss = rssMiB(pid);
      for (const body of bodies) await postOnce(url, body, 'image/jpeg'); // warm-up
      const byC = new Map<number, Figures>();
      let overallPeak = 0;
      for (const concurrency of opts.concurrency) {
        let peak = rssMiB(pid);
        const sampler = setInterval(() => {
          peak = Math.max(peak, rssMiB(pid));
        }, 10);
        const threads0 = threadCpu(pid);
        const cpu0 = cpuMs(pid);
        const load = await runLoad({
          url,
          bodies,
          contentType: 'image/jpeg',
          concurrency,
          seconds: opts.seconds,
        });
        const cpu1 = cpuMs(pid);
        if (opts.threads) {
          const n = load.requests + load.failures;
          const byName = new Map<string, number>();
          for (const [key, ms] of threadCpu(pid)) {
            const name = key.replace(/#\d+$/, '');
            byName.set(name, (byName.get(name) ?? 0) + (ms - (threads0.get(key) ?? 0)) / n);
          }
          const top = [...byName].filter(([, ms]) => ms >= 0.05).sort((a, b) => b[1] - a[1]);
          console.log(
            `  c${concurrency} ms/req by thread: ${top.map(([k, ms]) => `${k} ${ms.toFixed(2)}`).join(', ')}`,
          );
        }
        clearInterval(sampler);
        peak = Math.max(peak, rssMiB(pid));
        overallPeak = Math.max(overallPeak, peak);
        byC.set(concurrency, {
          cpuMsPerReq: (cpu1 - cpu0) / (load.requests + load.failures),
          perSecond: load.perSecond,
          p50: load.p50,
          peakRss: peak,
          failures: load.failures,
        });
      }
      closeLoadConnections();
      await new Promise((r) => setTimeout(r, 2000));
      const row: Row = { startRss, idleRss: rssMiB(pid), byC };
      if (big) {
        let peak = rssMiB(pid);
        const sampler = setInterval(() => {
          peak = Math.max(peak, rssMiB(pid));
        }, 10);
        const statuses = await Promise.all(Array.from({ length: 8 }, () => postOnce(url, big, 'image/png')));
        clearInterval(sampler);
        row.uploadPeak = Math.max(peak, rssMiB(pid));
        if (statuses.some((s) => s.status !== 200))
          console.log(`  uploads: ${statuses.map((s) => s.status)}`);
      }
      (rows.get(v.name) ?? rows.set(v.name, []).get(v.name))?.push(row);
      console.log(`round ${round} ${v.name}: ${describe(row)}`);
    } finally {
      closeLoadConnections();
      await child.stop();
    }
  }
}

function describe(row: Row): string {
  const parts = [...row.byC].map(
    ([c, f]) =>
      `c${c} ${f.cpuMsPerReq.toFixed(2)} ms CPU/req, ${f.perSecond.toFixed(1)} req/s, p50 ${f.p50.toFixed(1)} ms, peak ${f.peakRss.toFixed(0)} MiB${f.failures ? `, ${f.failures} failed` : ''}`,
  );
  parts.push(`ready ${row.startRss.toFixed(0)} MiB, idle after ${row.idleRss.toFixed(0)} MiB`);
  if (row.uploadPeak !== undefined) parts.push(`8×49 MB uploads peak ${row.uploadPeak.toFixed(0)} MiB`);
  return parts.join('; ');
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};
console.log(`\nmedians over ${opts.rounds} round(s), ${opts.seconds} s per concurrency:`);
for (const [name, list] of rows) {
  const byC = new Map<number, Figures>();
  for (const c of opts.concurrency) {
    const fs = list.map((r) => r.byC.get(c) as Figures);
    byC.set(c, {
      cpuMsPerReq: median(fs.map((f) => f.cpuMsPerReq)),
      perSecond: median(fs.map((f) => f.perSecond)),
      p50: median(fs.map((f) => f.p50)),
      peakRss: median(fs.map((f) => f.peakRss)),
      failures: fs.reduce((n, f) => n + f.failures, 0),
    });
  }
  const uploads = list.flatMap((r) => (r.uploadPeak === undefined ? [] : [r.uploadPeak]));
  const row: Row = {
    startRss: median(list.map((r) => r.startRss)),
    idleRss: median(list.map((r) => r.idleRss)),
    byC,
    ...(uploads.length ? { uploadPeak: median(uploads) } : {}),
  };
  console.log(`${name.padEnd(14)} ${describe(row)}`);
}
