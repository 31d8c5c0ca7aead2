// Side by side: our server against the Python peer (bench/python-peer/server.py: Starlette
// on uvicorn, 2 workers, onnxruntime with 2 intra-op threads, pyvips, the same preprocessing), and our
// server with JPEG_DECODER=sharp (every JPEG through libvips, no libjpeg fast path): what the
// fast path buys, from the same run. One server is loaded at a time: each round starts ours, measures,
// stops it, then the same for ours with sharp and for the peer, five rounds interleaved, and the table
// gives each figure's median. Before the peer is measured its scores are compared with ours on every
// bench image.
//
// CPU per request: utime + stime (and the reaped children's) summed over the server's whole process
// tree from /proc, across the ~1 MP concurrency-8 load, divided by the requests answered: our worker
// threads are in our process, uvicorn's workers are child processes. Peak RSS: the sum of VmRSS over
// the same tree, sampled every 20 ms during that load.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../lib/common/node-runtime.ts';
import { type Child, spawnChild } from '../test/support/children.ts';
import { processTree } from '../test/support/process-tree.ts';
import { listeningPort, ROOT } from '../test/support/server-process.ts';
import { type LoadResult, runLoad } from './http-load.ts';
import { benchImages, ONE_MP, THREE_MP } from './images.ts';
import { findPeerPython, PEER_INSTALL, PEER_SCORE_BOUND, PEER_VENV, startPeer } from './python-peer/venv.ts';

const DETECT = '/api/public/detect';
const OUR_ENV = { ANON_PER_MINUTE: '1000000', ANON_PER_DAY: '1000000', LOG_LEVEL: 'warn' };
const MiB = 1024 * 1024;
const TICK_MS = 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim() || 100);

interface Running {
  url: string;
  pid: number;
  stop: () => Promise<unknown>;
}

interface RoundFigures {
  rps1: number;
  rps3: number;
  p50: number;
  cpuMs: number;
  rssPeak: number;
  failures: number;
}

// --- our server, as production runs it ----------------------------------------------------------------

/** What `npm start` runs: the prestart's build when dist/ is stale, then `node dist/…/server.js`. */
function ourEntry(): { args: string[]; how: string } {
  execFileSync(process.execPath, ['tools/build/dist.ts', '--if-stale'], { cwd: ROOT, stdio: 'inherit' });
  return {
    args: ['dist/services/all-in-one/server.js'],
    how: `node ${PRODUCTION_NODE_FLAGS.join(' ')} dist/services/all-in-one/server.js (npm start and the image)`,
  };
}

async function startOurs(args: string[], env: Record<string, string> = {}): Promise<Running> {
  const accounts = mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-'));
  // Node as the image and npm start run it (flags and environment: lib/common/node-runtime.ts).
  const child = spawnChild('nsfwdetector', process.execPath, [...PRODUCTION_NODE_FLAGS, ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...PRODUCTION_ENV,
      ACCOUNTS_FILE: join(accounts, 'accounts.json'),
      HOST: '127.0.0.1',
      PORT: '0',
      ...OUR_ENV,
      ...env,
    },
  });
  const stop = async () => {
    await child.stop();
    rmSync(accounts, { recursive: true, force: true });
  };
  try {
    const url = `http://127.0.0.1:${await listeningPort(child)}`;
    await waitFor(child, `${url}/internal/ready`);
    return { url, pid: child.pid, stop };
  } catch (err) {
    await child.kill();
    rmSync(accounts, { recursive: true, force: true });
    throw new Error(`our server did not start: ${(err as Error).message}\n${child.output()}`);
  }
}

async function waitFor(child: Child, url: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!child.running()) throw new Error('exited before it was ready');
    const status = await fetch(url).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`not ready after ${timeoutMs} ms`);
}

// --- /proc: a process tree's CPU time and resident memory -------------------------------------------

/** CPU time of the tree in ms: utime + stime of each process (all its threads), plus cutime + cstime
 * (children already reaped, so a worker that exits mid-load keeps counting). */
export function treeCpuMs(tree: number[]): number {
  let ticks = 0;
  for (const pid of tree) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    } catch {
      // exited: its time is in its parent's cutime/cstime once reaped
    }
  }
  return ticks * TICK_MS;
}

export function treeRssBytes(tree: number[]): number {
  let kb = 0;
  for (const pid of tree) {
    try {
      kb += Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      // exited
    }
  }
  return kb * 1024;
}

// --- measuring -----------------------------------------------------------------------------------------

async function nsfwScores(url: string, bodies: Buffer[]): Promise<number[]> {
  const scores: number[] = [];
  for (const body of bodies) {
    const res = await fetch(`${url}${DETECT}`, {
      method: 'POST',
      body: new Uint8Array(body),
      headers: { 'content-type': 'image/jpeg' },
    });
    const json = (await res.json()) as { data?: { scores?: { nsfw?: number } } };
    const nsfw = json.data?.scores?.nsfw;
    if (res.status !== 200 || typeof nsfw !== 'number')
      throw new Error(`${url}: ${res.status} ${JSON.stringify(json)}`);
    scores.push(nsfw);
  }
  return scores;
}

async function measure(
  server: Running,
  one: Buffer[],
  three: Buffer[],
  seconds: number,
): Promise<RoundFigures> {
  const url = `${server.url}${DETECT}`;
  const load = (bodies: Buffer[], concurrency: number): Promise<LoadResult> =>
    runLoad({ url, bodies, contentType: 'image/jpeg', concurrency, seconds });
  // Warm-up: every worker of either server has decoded and scored both sizes before anything counts.
  for (const bodies of [one, three])
    await runLoad({ url, bodies, contentType: 'image/jpeg', concurrency: 8, seconds: 10, maxRequests: 16 });

  let tree = processTree(server.pid);
  let rssPeak = treeRssBytes(tree);
  let samples = 0;
  const sampler = setInterval(() => {
    if (++samples % 25 === 0) tree = processTree(server.pid); // a worker may have been replaced
    rssPeak = Math.max(rssPeak, treeRssBytes(tree));
  }, 20);
  const cpuBefore = treeCpuMs(tree);
  const c8one = await load(one, 8);
  const cpuAfter = treeCpuMs(processTree(server.pid));
  clearInterval(sampler);
  rssPeak = Math.max(rssPeak, treeRssBytes(tree));

  const c8three = await load(three, 8);
  const c1 = await load(one, 1);
  return {
    rps1: c8one.perSecond,
    rps3: c8three.perSecond,
    p50: c1.p50,
    cpuMs: (cpuAfter - cpuBefore) / c8one.requests,
    rssPeak,
    failures: c8one.failures + c8three.failures + c1.failures,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/**
 * Runs the comparison and returns the lines to print (table last); one line saying so when the peer is
 * not installed. Throws when its scores differ from ours by more than PEER_SCORE_BOUND.
 */
export async function peerComparison(opts: {
  seconds: number;
  rounds?: number;
  log?: (line: string) => void;
}): Promise<string[]> {
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? ((line: string) => console.log(line));
  if (!findPeerPython())
    return [`peer: skipped, the Python peer is not installed (${PEER_VENV}; install: ${PEER_INSTALL})`];
  const oneImages = await benchImages(ONE_MP);
  const threeImages = await benchImages(THREE_MP);
  const one = oneImages.map((i) => i.jpeg);
  const three = threeImages.map((i) => i.jpeg);
  const entry = ourEntry();
  // Progress goes to `log` as it happens; the returned lines (printed last) repeat what the table needs.
  log(
    'peer: Python peer = bench/python-peer/server.py (Starlette/uvicorn, uvloop, httptools, 2 workers; onnxruntime 2 intra-op threads; pyvips)',
  );
  log(
    `peer: ${rounds} rounds of ${opts.seconds} s per figure, one server loaded at a time; ~1 MP = ${ONE_MP.width}×${ONE_MP.height}, 3 MP = ${THREE_MP.width}×${THREE_MP.height} JPEGs (${one.length} of each)`,
  );
  const lines = [`peer: ours = ${entry.how}`];
  log(lines[0] as string);

  const ours: RoundFigures[] = [];
  const before: RoundFigures[] = [];
  const peer: RoundFigures[] = [];
  let ourScores: number[] = [];
  const measureOurs = async (env: Record<string, string>, into: RoundFigures[], round: number) => {
    const server = await startOurs(entry.args, env);
    try {
      const scores = await nsfwScores(server.url, [...one, ...three]);
      if (into === ours && round === 0) ourScores = scores;
      // The fast path is bit-identical to sharp: the same scores, or the comparison is void.
      if (into === before && scores.some((s, i) => s !== ourScores[i]))
        throw new Error('JPEG_DECODER=sharp scored the bench images differently from the fast path');
      into.push(await measure(server, one, three, opts.seconds));
    } finally {
      await server.stop();
    }
  };
  for (let round = 0; round < rounds; round++) {
    await measureOurs({}, ours, round);
    await measureOurs({ JPEG_DECODER: 'sharp' }, before, round);
    const started = await startPeer();
    const running: Running = { url: started.url, pid: started.child.pid, stop: started.stop };
    try {
      if (round === 0) {
        // The peer is measured only once it has been shown to compute what we compute.
        const peerScores = await nsfwScores(running.url, [...one, ...three]);
        const maxDelta = Math.max(...peerScores.map((s, i) => Math.abs(s - (ourScores[i] as number))));
        const parity = `peer: scores vs ours on the ${peerScores.length} bench images: max |Δ nsfw| = ${maxDelta.toExponential(2)} (bound ${PEER_SCORE_BOUND}${maxDelta === 0 ? '; bit-identical' : ''})`;
        log(parity);
        lines.push(parity);
        if (!(maxDelta <= PEER_SCORE_BOUND))
          throw new Error(`${parity}: the peer does not compute our scores`);
      }
      peer.push(await measure(running, one, three, opts.seconds));
    } finally {
      await running.stop();
    }
    const figures = (r: RoundFigures) =>
      `${r.rps1.toFixed(1)} / ${r.rps3.toFixed(1)} req/s, p50 ${r.p50.toFixed(1)} ms, CPU ${r.cpuMs.toFixed(1)} ms/req, RSS ${(r.rssPeak / MiB).toFixed(0)} MiB, ${r.failures} failed`;
    log(`peer: round ${round + 1}/${rounds} ours:  ${figures(ours[round] as RoundFigures)}`);
    log(`peer: round ${round + 1}/${rounds} sharp: ${figures(before[round] as RoundFigures)}`);
    log(`peer: round ${round + 1}/${rounds} peer:  ${figures(peer[round] as RoundFigures)}`);
  }

  const m = (xs: RoundFigures[], k: keyof RoundFigures) => median(xs.map((x) => x[k]));
  const rows: string[][] = [
    [
      `figure (median of ${rounds} rounds)`,
      'ours',
      'Python peer',
      'ratio',
      'target',
      'ours, JPEG_DECODER=sharp',
      'its ratio',
    ],
  ];
  const row = (label: string, k: keyof RoundFigures, show: (x: number) => string, target: string) => {
    const a = m(ours, k);
    const b = m(peer, k);
    const c = m(before, k);
    rows.push([label, show(a), show(b), `${(a / b).toFixed(2)}×`, target, show(c), `${(c / b).toFixed(2)}×`]);
  };
  row('req/s, ~1 MP JPEG, concurrency 8', 'rps1', (x) => x.toFixed(1), '≥ 2.0× the peer');
  row('req/s, 3 MP JPEG, concurrency 8', 'rps3', (x) => x.toFixed(1), '≥ 1.6× the peer');
  row('p50, ~1 MP, concurrency 1', 'p50', (x) => `${x.toFixed(1)} ms`, 'ours ≤ 12 ms');
  row('server CPU per request, ~1 MP', 'cpuMs', (x) => `${x.toFixed(1)} ms`, 'ours ≤ 11 ms');
  row(
    'peak RSS under that load',
    'rssPeak',
    (x) => `${(x / MiB).toFixed(0)} MiB`,
    '≤ the peer (ratio ≤ 1.00×)',
  );
  const widths = rows[0]?.map((_, c) => Math.max(...rows.map((r) => (r[c] as string).length))) ?? [];
  const cells = (r: string[]) => `| ${r.map((cell, c) => cell.padEnd(widths[c] as number)).join(' | ')} |`;
  const rule = `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`;
  lines.push('', cells(rows[0] as string[]), rule, ...rows.slice(1).map(cells));
  const failures = [...ours, ...before, ...peer].reduce((n, r) => n + r.failures, 0);
  if (failures > 0) lines.push(`peer: ${failures} requests failed over all rounds (not counted in req/s)`);
  return lines;
}
