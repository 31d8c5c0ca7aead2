// Side by side: our server against the Python peer (bench/python-peer/server.py: Starlette
// on uvicorn, 2 workers, onnxruntime with 2 intra-op threads, pyvips, the same preprocessing), our
// server with JPEG_DECODER=sharp (every JPEG through libvips, no libjpeg fast path: what the fast path
// buys), our server with PDQ_HASHES=on (every image hashed, as while a hash list is in force: what PDQ
// costs; ours runs with every default, auto, and no list, so it hashes nothing, as the peer), and — with BENCH_BASELINE=<a built checkout of another commit> (e.g. `git worktree add --detach
// ../base-11c6cd2 11c6cd2`, then `npm ci` there) — that commit's server under the same load. One server
// is loaded at a time: each round starts each in turn, measures, stops it, five rounds interleaved, and
// the table gives each figure's median. Before the peer is measured its scores are compared with ours
// on every bench image.
//
// Every process counts: CPU per request is utime + stime (and the reaped children's) summed over the
// server's whole process tree from /proc (our decoder processes, uvicorn's master and workers), across
// the ~1 MP concurrency-8 load, divided by the requests answered. RSS is the sum of VmRSS over the same
// tree (re-listed every 100 ms, so a decoder process started under load counts): at rest (after the
// warm-up, 2 s without load) and its peak, sampled every 20 ms during that load. The floor is what one
// ~1 MP request cannot cost less than: its decode and its inference, one after the other on one core in
// this process (the fast path and one intra-op thread, as a worker thread runs them).

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../lib/common/node-runtime.ts';
import { SETTINGS } from '../lib/common/settings.ts';
import { resolveJpegDecoder } from '../services/detect/image/libjpeg/jpeg-tensor.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { createOnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { decodeForModel, InProcessScorer } from '../services/detect/scoring/image-scorer.ts';
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
  rssRest: number;
  rssPeak: number;
  /** The most processes the server's tree had during the load. */
  processes: number;
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

async function startOurs(
  args: string[],
  env: Record<string, string> = {},
  cwd: string = ROOT,
): Promise<Running> {
  const accounts = mkdtempSync(join(tmpdir(), 'nsfwdetector-accounts-'));
  // Node as the image and npm start run it (flags and environment: lib/common/node-runtime.ts).
  const child = spawnChild('nsfwdetector', process.execPath, [...PRODUCTION_NODE_FLAGS, ...args], {
    cwd,
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

  await new Promise((r) => setTimeout(r, 2_000));
  let tree = processTree(server.pid);
  const rssRest = treeRssBytes(tree);
  let rssPeak = rssRest;
  let processes = tree.length;
  let samples = 0;
  const sampler = setInterval(() => {
    if (++samples % 5 === 0) tree = processTree(server.pid); // a decoder may have started or ended
    processes = Math.max(processes, tree.length);
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
    rssRest,
    rssPeak,
    processes,
    failures: c8one.failures + c8three.failures + c1.failures,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** The CPU this runs on: /proc/cpuinfo's model name and its vector extensions (what ONNX Runtime uses). */
export function cpuModel(): string {
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    const name = /^model name\s*:\s*(.+)$/m.exec(info)?.[1]?.trim() ?? 'unknown CPU';
    const flags = new Set(/^flags\s*:\s*(.+)$/m.exec(info)?.[1]?.split(/\s+/) ?? []);
    const vector = ['avx2', 'avx512f', 'avx512_vnni', 'avx_vnni', 'amx_tile'].filter((f) => flags.has(f));
    const cores = info.match(/^processor\s*:/gm)?.length ?? 0;
    return `${name}, ${cores} cores, ${vector.join(' ') || 'no AVX2'}`;
  } catch {
    return 'unknown CPU (no /proc/cpuinfo)';
  }
}

/**
 * The floor of one ~1 MP request: its decode (the fast path, as the worker threads run it) and its
 * inference (one intra-op thread), one after the other on one core, in this process: CPU ms per image,
 * the median of three passes over the images after one unmeasured.
 */
async function floorCpuMs(bodies: Buffer[]): Promise<{ decode: number; inference: number }> {
  const jpegDecoder = resolveJpegDecoder('auto');
  const scorer = new InProcessScorer(
    await createOnnxClassifier({ model: 'mobilenet_v2', intraOpThreads: 1 }),
  );
  const options = { model: scorer.model, jpegDecoder, maxTiles: SETTINGS.MAX_TILES.default };
  const cpuMs = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  };
  const decodes: number[] = [];
  const inferences: number[] = [];
  try {
    for (let pass = 0; pass < 4; pass++) {
      let decode = 0;
      let inference = 0;
      for (const body of bodies) {
        const bytes = new Uint8Array(body);
        const probed = probeHeader(bytes, 'jpeg');
        const a = cpuMs();
        const { tensor } = await decodeForModel(bytes, probed, scorer.inputSize, options);
        const b = cpuMs();
        await scorer.infer(tensor);
        const c = cpuMs();
        decode += b - a;
        inference += c - b;
      }
      if (pass > 0) {
        decodes.push(decode / bodies.length);
        inferences.push(inference / bodies.length);
      }
    }
  } finally {
    await scorer.close();
  }
  return { decode: median(decodes), inference: median(inferences) };
}

interface Contender {
  /** Column heading. */
  label: string;
  start: () => Promise<Running>;
  rounds: RoundFigures[];
  /** Its scores must equal ours exactly (the same pipeline), else the comparison is void. */
  sameScores: boolean;
}

/**
 * Runs the comparison and returns the lines to print (table last); one line saying so when the peer is
 * not installed. Throws when its scores differ from ours by more than PEER_SCORE_BOUND.
 */
export async function peerComparison(opts: {
  seconds: number;
  rounds?: number;
  /** A built checkout of another commit, measured beside (BENCH_BASELINE). */
  baseline?: string;
  log?: (line: string) => void;
}): Promise<string[]> {
  const rounds = opts.rounds ?? 5;
  const log = opts.log ?? ((line: string) => console.log(line));
  const baseline = opts.baseline ?? process.env.BENCH_BASELINE;
  if (!findPeerPython())
    return [`peer: skipped, the Python peer is not installed (${PEER_VENV}; install: ${PEER_INSTALL})`];
  if (baseline && !existsSync(join(baseline, 'dist/services/all-in-one/server.js')))
    throw new Error(
      `BENCH_BASELINE=${baseline}: no dist/services/all-in-one/server.js there (npm ci builds it)`,
    );
  const oneImages = await benchImages(ONE_MP);
  const threeImages = await benchImages(THREE_MP);
  const one = oneImages.map((i) => i.jpeg);
  const three = threeImages.map((i) => i.jpeg);
  const entry = ourEntry();
  // Progress goes to `log` as it happens; the returned lines (printed last) repeat what the table needs.
  const lines = [
    `peer: CPU = ${cpuModel()}`,
    'peer: Python peer = bench/python-peer/server.py (Starlette/uvicorn, uvloop, httptools, 2 workers; onnxruntime 2 intra-op threads; pyvips)',
    `peer: ours = ${entry.how}`,
  ];
  if (baseline) {
    const commit = execFileSync('git', ['-C', baseline, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' });
    lines.push(`peer: baseline = ${baseline} at ${commit.trim().slice(0, 100)}, run the same way`);
  }
  for (const line of lines) log(line);
  log(
    `peer: ${rounds} rounds of ${opts.seconds} s per figure, one server loaded at a time; ~1 MP = ${ONE_MP.width}×${ONE_MP.height}, 3 MP = ${THREE_MP.width}×${THREE_MP.height} JPEGs (${one.length} of each)`,
  );
  const floor = await floorCpuMs(one);
  const floorLine = `peer: floor per ~1 MP request (decode + inference, one core, this process): ${(floor.decode + floor.inference).toFixed(1)} ms of CPU (decode ${floor.decode.toFixed(1)}, inference ${floor.inference.toFixed(1)})`;
  log(floorLine);
  lines.push(floorLine);

  const ours: Contender = { label: 'ours', start: () => startOurs(entry.args), rounds: [], sameScores: true };
  const sharp: Contender = {
    label: 'ours, JPEG_DECODER=sharp',
    start: () => startOurs(entry.args, { JPEG_DECODER: 'sharp' }),
    rounds: [],
    sameScores: true,
  };
  const withPdq: Contender = {
    label: 'ours, PDQ_HASHES=on',
    start: () => startOurs(entry.args, { PDQ_HASHES: 'on' }),
    rounds: [],
    sameScores: true,
  };
  const base: Contender | undefined = baseline
    ? {
        label: `baseline ${execFileSync('git', ['-C', baseline, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()}`,
        start: () => startOurs(['dist/services/all-in-one/server.js'], {}, baseline),
        rounds: [],
        sameScores: false,
      }
    : undefined;
  const peer: Contender = {
    label: 'Python peer',
    start: async () => {
      const started = await startPeer();
      return { url: started.url, pid: started.child.pid, stop: started.stop };
    },
    rounds: [],
    sameScores: false,
  };
  const contenders = [ours, withPdq, sharp, ...(base ? [base] : []), peer];
  let ourScores: number[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const contender of contenders) {
      const server = await contender.start();
      try {
        if (round === 0) {
          const scores = await nsfwScores(server.url, [...one, ...three]);
          if (contender === ours) ourScores = scores;
          else if (contender.sameScores) {
            // The fast path is bit-identical to sharp, and PDQ changes no score: the same scores, or the
            // comparison is void.
            if (scores.some((x, i) => x !== ourScores[i]))
              throw new Error(`${contender.label} scored the bench images differently from ours`);
          } else {
            // Measured only once it has been shown to compute what we compute.
            const maxDelta = Math.max(...scores.map((x, i) => Math.abs(x - (ourScores[i] as number))));
            const parity = `peer: ${contender.label}'s scores vs ours on the ${scores.length} bench images: max |Δ nsfw| = ${maxDelta.toExponential(2)} (bound ${PEER_SCORE_BOUND}${maxDelta === 0 ? '; bit-identical' : ''})`;
            log(parity);
            lines.push(parity);
            if (!(maxDelta <= PEER_SCORE_BOUND)) throw new Error(`${parity}: it does not compute our scores`);
          }
        }
        contender.rounds.push(await measure(server, one, three, opts.seconds));
      } finally {
        await server.stop();
      }
      const r = contender.rounds[round] as RoundFigures;
      log(
        `peer: round ${round + 1}/${rounds} ${contender.label}: ${r.rps1.toFixed(1)} / ${r.rps3.toFixed(1)} req/s, p50 ${r.p50.toFixed(1)} ms, CPU ${r.cpuMs.toFixed(1)} ms/req, RSS ${(r.rssRest / MiB).toFixed(0)} at rest, ${(r.rssPeak / MiB).toFixed(0)} MiB peak over ${r.processes} processes, ${r.failures} failed`,
      );
    }
  }

  const m = (c: Contender, k: keyof RoundFigures) => median(c.rounds.map((x) => x[k]));
  const others = contenders.filter((c) => c !== ours && c !== peer);
  const rows: string[][] = [
    [
      `figure (median of ${rounds} rounds)`,
      'ours',
      'Python peer',
      'ratio',
      'target',
      ...others.flatMap((c) => [c.label, 'its ratio']),
    ],
  ];
  const row = (label: string, k: keyof RoundFigures, show: (x: number) => string, target: string) => {
    const b = m(peer, k);
    const ratio = (c: Contender) => `${(m(c, k) / b).toFixed(2)}×`;
    rows.push([
      label,
      show(m(ours, k)),
      show(b),
      ratio(ours),
      target,
      ...others.flatMap((c) => [show(m(c, k)), ratio(c)]),
    ]);
  };
  const mib = (x: number) => `${(x / MiB).toFixed(0)} MiB`;
  row('req/s, ~1 MP JPEG, concurrency 8', 'rps1', (x) => x.toFixed(1), '≥ 2.0× the peer');
  row('req/s, 3 MP JPEG, concurrency 8', 'rps3', (x) => x.toFixed(1), '≥ 1.6× the peer');
  row('p50, ~1 MP, concurrency 1', 'p50', (x) => `${x.toFixed(1)} ms`, 'ours ≤ 12 ms');
  row(
    'CPU per request, ~1 MP (all processes)',
    'cpuMs',
    (x) => `${x.toFixed(1)} ms`,
    `floor ${(floor.decode + floor.inference).toFixed(1)} ms`,
  );
  row('RSS at rest (all processes)', 'rssRest', mib, '');
  row('peak RSS under that load (all processes)', 'rssPeak', mib, '≤ the peer (ratio ≤ 1.00×)');
  row('processes at peak', 'processes', (x) => x.toFixed(0), '');
  const widths = rows[0]?.map((_, c) => Math.max(...rows.map((r) => (r[c] as string).length))) ?? [];
  const cells = (r: string[]) => `| ${r.map((cell, c) => cell.padEnd(widths[c] as number)).join(' | ')} |`;
  const rule = `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`;
  lines.push('', cells(rows[0] as string[]), rule, ...rows.slice(1).map(cells));
  const failures = contenders.reduce((n, c) => n + c.rounds.reduce((k, r) => k + r.failures, 0), 0);
  if (failures > 0) lines.push(`peer: ${failures} requests failed over all rounds (not counted in req/s)`);
  return lines;
}
