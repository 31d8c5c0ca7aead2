// `npm run bench -- --only fairness`: what a 1 MP image waits for beside the costliest traffic, on the
// real server (embedded, default configuration, clients told apart by X-Forwarded-For with
// TRUSTED_PROXY_HOPS=1), with the host busy: two CPU hogs at normal priority run beside the server for
// the baseline and every phase alike (on an idle host no deadline fires; an attacker makes it busy).
//   baseline  4 loops of 1 MP probes, alone (but for the hogs);
//   mix       8 loops of the largest allowed images (200 MP JPEG, 36 MP 16-bit PNG, 48 MP progressive
//             JPEG, ~49 MB noise PNG), each from its own address, beside one loop of 1 MP probes;
//   attacks   two loops from ONE address of each scan-bound JPEG — the 14142² grey 42-scan and the
//             30000×4472 64-scan strip (the most the former MAX_JPEG_SCAN_BLOCKS allowed, ~5.7 s of CPU
//             each on an Intel Xeon), and the 14142² 25-scan one (the most the bound allows now) —
//             beside 4 loops of 1 MP probes: the probes' p50/p99 and 503s, what the attack got and how
//             many of its answers were charged (anything but a 503 is), the peak memory of the server
//             with its decoder processes (PSS summed: a shared page counted once), sampled every 50 ms;
//   uploads   8 loops of 40–50 MB legitimate PNGs, each from its own address, beside 4 loops of probes;
//   walks     4 concurrent loops of the 51 MB PNG of 4.3 M empty chunks, beside a loop asking
//             /api/public/health and /internal/live: the longest either waited.
// BENCH_FAIRNESS_PHASES (comma-separated, of the five above) runs fewer; every phase by default.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../lib/common/node-runtime.ts';
import { loadAllInOneConfig } from '../services/all-in-one/config.ts';
import { type HostileImageName, hostileImage } from '../test/support/hostile-images.ts';
import { startServer } from '../test/support/server-process.ts';
import { percentile } from './http-load.ts';
import { benchImages } from './images.ts';
import { texture, treeMemory } from './memory.ts';

const MiB = 1024 * 1024;
/** The chart's detect memory limit (values.yaml, detect.resources.limits), which the peak must stay under. */
const CHART_MEMORY_LIMIT_MIB = Number(
  /\ndetect:\n[\s\S]*?limits: \{[^}]*memory: (\d+)Mi/.exec(
    readFileSync(new URL('../charts/nsfwdetector/values.yaml', import.meta.url), 'utf8'),
  )?.[1],
);

interface Answer {
  status: number;
  code: number;
  ms: number;
}

async function post(url: string, body: Uint8Array, type: string, address: string): Promise<Answer> {
  const started = performance.now();
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': type, 'x-forwarded-for': address },
      // A Buffer may be a slice of a shared pool: sent as a copy of its own bytes.
      body: Buffer.isBuffer(body) ? new Uint8Array(body) : (body as Uint8Array<ArrayBuffer>),
    });
    const { code } = (await res.json()) as { code: number };
    return { status: res.status, code, ms: performance.now() - started };
  } catch {
    return { status: 0, code: -1, ms: performance.now() - started };
  }
}

/** Loops `send` until `until`, collecting the answers. */
async function loop(until: () => boolean, send: () => Promise<Answer>): Promise<Answer[]> {
  const answers: Answer[] = [];
  while (!until()) answers.push(await send());
  return answers;
}

function latency(answers: Answer[]): string {
  const ok = answers
    .filter((a) => a.status === 200)
    .map((a) => a.ms)
    .sort((a, b) => a - b);
  const unavailable = answers.filter((a) => a.status === 503).length;
  const other = answers.length - ok.length - unavailable;
  return `p50 ${(percentile(ok, 50) / 1000).toFixed(2)} s, p99 ${(percentile(ok, 99) / 1000).toFixed(2)} s (${ok.length} × 200, ${unavailable} × 503, ${other} other)`;
}

function tally(answers: Answer[]): string {
  const counts = new Map<string, number>();
  for (const a of answers)
    counts.set(`${a.status}/${a.code}`, (counts.get(`${a.status}/${a.code}`) ?? 0) + 1);
  return [...counts].map(([k, n]) => `${n}× ${k}`).join(', ');
}

/** A process spinning on one core at normal priority. */
function cpuHog(): ChildProcess {
  return spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
}

/** Answers other than 503 count against the quota (charged); a 503 is refunded. */
function charged(answers: Answer[]): string {
  const answered = answers.filter((a) => a.status !== 0);
  const kept = answered.filter((a) => a.status !== 503).length;
  return `${kept} of ${answered.length} answered charged`;
}

/**
 * Asks /api/public/health and /internal/live in turn, every 20 ms for `ms`, from a process of its own
 * (so that the bench's own uploads do not delay it): the longest answer and how many were asked.
 */
function healthProber(base: string, ms: number): Promise<{ longest: number; asked: number }> {
  const script = `
    const [base, ms] = [process.argv[1], Number(process.argv[2])];
    const end = performance.now() + ms;
    let longest = 0, asked = 0;
    while (performance.now() < end) {
      const started = performance.now();
      try { await (await fetch(base + (asked++ % 2 ? '/internal/live' : '/api/public/health'))).arrayBuffer(); } catch {}
      longest = Math.max(longest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    process.stdout.write(JSON.stringify({ longest, asked }));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, base, String(ms)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return new Promise((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`health prober exited ${code}`)),
    ),
  );
}

/**
 * Loops POSTing each of `files` (one loop a file, each from its own address) for `ms`, from a process
 * of its own: sending a 50 MB body holds the sender's event loop for about half a second, which would
 * otherwise land on the probes measured here. Resolves to the answers' statuses and codes.
 */
function uploadLoops(
  url: string,
  files: string[],
  type: string,
  addressPrefix: string,
  ms: number,
): Promise<Answer[]> {
  const script = `
    import { readFileSync } from 'node:fs';
    const [url, type, prefix, ms, ...files] = process.argv.slice(1);
    const bodies = files.map((file) => new Uint8Array(readFileSync(file)));
    const end = performance.now() + Number(ms);
    const answers = [];
    await Promise.all(bodies.map(async (body, i) => {
      while (performance.now() < end) {
        const started = performance.now();
        try {
          const res = await fetch(url, { method: 'POST', headers: { 'content-type': type, 'x-forwarded-for': prefix + (i + 1) }, body });
          const { code } = await res.json();
          answers.push({ status: res.status, code, ms: performance.now() - started });
        } catch {
          answers.push({ status: 0, code: -1, ms: performance.now() - started });
        }
      }
    }));
    process.stdout.write(JSON.stringify(answers));`;
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', script, url, type, addressPrefix, String(ms), ...files],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return new Promise((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`upload loops exited ${code}`)),
    ),
  );
}

const stall = ({ longest, asked }: { longest: number; asked: number }) =>
  `${longest.toFixed(0)} ms (${asked} asked)`;

/** The server's longest event-loop delay between `from` and `to` (epoch ms), from bench/loop-stall.mjs. */
function loopStall(file: string, from: number, to: number): string {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return 'not measured';
  }
  const windows = text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as [number, number, number?, string?, number?])
    .filter(([at]) => at >= from && at <= to + 250);
  const longest = windows.reduce((a, b) => (b[1] > a[1] ? b : a), [
    0,
    0,
    0,
    '',
    0,
  ] as (typeof windows)[number]);
  const gc = windows.reduce((a, b) => ((b[2] ?? 0) > (a[2] ?? 0) ? b : a), [
    0,
    0,
    0,
    '',
  ] as (typeof windows)[number]);
  return (
    `${longest[1].toFixed(0)} ms (${windows.length} windows of 250 ms; in its window the main thread ran ` +
    `${(longest[4] ?? 0).toFixed(0)} ms of CPU, its longest GC pause ` +
    `${(longest[2] ?? 0).toFixed(0)} ms${longest[3] ? ` ${longest[3]}` : ''}; longest GC pause of the phase ` +
    `${(gc[2] ?? 0).toFixed(0)} ms${gc[3] ? ` ${gc[3]}` : ''})`
  );
}

const PHASES = ['baseline', 'mix', 'attacks', 'uploads', 'walks'] as const;
const CHOSEN = new Set(process.env.BENCH_FAIRNESS_PHASES?.split(',') ?? PHASES);
for (const phase of CHOSEN)
  if (!(PHASES as readonly string[]).includes(phase))
    throw new Error(`BENCH_FAIRNESS_PHASES: no phase "${phase}" (${PHASES.join(', ')})`);

const ATTACKS: Array<[HostileImageName, string]> = [
  ['jpeg-scan-blocks-131m-grey', '14142² grey 42-scan JPEG (131 M blocks)'],
  ['jpeg-scan-blocks-strip-30000x4472', '30000×4472 grey 64-scan JPEG (134 M blocks)'],
  ['jpeg-scan-blocks-at-limit-grey', '14142² grey 25-scan JPEG (78 M blocks: the most allowed now)'],
];

export async function fairnessSection(seconds: number): Promise<Array<[string, string]>> {
  const config = loadAllInOneConfig(process.env);
  const lines: Array<[string, string]> = [];
  const probes = (await benchImages()).map((i) => i.jpeg);
  const largest = await Promise.all([
    texture(20000, 10000, 3).jpeg({ quality: 70 }).toBuffer(),
    texture(8000, 6000, 3).jpeg({ quality: 80, progressive: true }).toBuffer(),
    texture(6000, 6000, 4).png({ compressionLevel: 9 }).toColourspace('rgb16').toBuffer(),
    texture(4096, 4000, 3).png({ compressionLevel: 1 }).toBuffer(),
  ]);
  const types = ['image/jpeg', 'image/jpeg', 'image/png', 'image/png'];
  // Noise: incompressible, so 40–50 MB files (a texture compresses to 4–5 MB).
  const noisePng = (width: number, height: number) =>
    sharp({
      create: {
        width,
        height,
        channels: 3,
        background: '#808080',
        noise: { type: 'gaussian', mean: 128, sigma: 60 },
      },
    })
      .png({ compressionLevel: 1 })
      .toBuffer();
  const bigPngs = await Promise.all([noisePng(4096, 4000), noisePng(3800, 3600)]);
  const chunky = await hostileImage('png-4m-empty-chunks');
  const stallDir = mkdtempSync(join(tmpdir(), 'fairness-stall-'));
  const stallFile = join(stallDir, 'loop.jsonl');
  const bigFiles = bigPngs.map((png, i) => {
    const file = join(stallDir, `large-${i}.png`);
    writeFileSync(file, png);
    return file;
  });
  const preload = new URL('./loop-stall.mjs', import.meta.url).href;
  const server = await startServer({
    ANON_PER_MINUTE: '1000000',
    ANON_PER_DAY: '1000000',
    TRUSTED_PROXY_HOPS: '1',
    LOG_LEVEL: 'warn',
    // As production runs it (lib/common/node-runtime.ts): the young generation's size sets the GC pauses.
    ...PRODUCTION_ENV,
    NODE_OPTIONS: [process.env.NODE_OPTIONS ?? '', ...PRODUCTION_NODE_FLAGS, `--import=${preload}`]
      .join(' ')
      .trim(),
    LOOP_STALL_FILE: stallFile,
  });
  // Started once the server is up: a server that fails to start leaves no hog spinning behind it.
  const hogs = [cpuHog(), cpuHog()];
  let sampler: NodeJS.Timeout | undefined;
  try {
    const url = `${server.url}/api/public/detect`;
    const pid = server.proc.pid as number;
    for (const probe of probes) await post(url, probe, 'image/jpeg', '10.9.0.1');
    let peak = treeMemory(pid);
    const rest = peak;
    // The peak is sampled only in the phases that report it (mix, attacks). Reading
    // /proc/<pid>/smaps_rollup holds the server's mmap_lock, and this process, beside the hogs, is often
    // preempted while it holds it: the server's main thread then waits in brk, mmap or munmap (malloc
    // growing or trimming its heap, a 52 MB body's buffer) — measured, waits of up to 421 ms, 2.4 s in
    // 10 s of the walks phase — a stall the sampler made, not the server.
    const samplePeak = () => {
      peak = treeMemory(pid);
      sampler ??= setInterval(() => {
        peak = Math.max(peak, treeMemory(pid));
      }, 50);
    };
    const stopSampling = () => {
      clearInterval(sampler);
      sampler = undefined;
    };
    let n = 0;
    const probe = (address: string) => () =>
      post(url, probes[n++ % probes.length] as Buffer, 'image/jpeg', address);
    let end = 0;
    const over = () => performance.now() > end;
    const legitLoops = (prefix: string) =>
      Array.from({ length: 4 }, (_, i) => loop(over, probe(`${prefix}.${i + 1}`)));

    let from = Date.now();
    if (CHOSEN.has('baseline')) {
      // Baseline: the probes alone, beside the hogs.
      end = performance.now() + seconds * 1000;
      from = Date.now();
      const [quiet, ...baseline] = await Promise.all([
        healthProber(server.url, seconds * 1000),
        ...legitLoops('10.8.0'),
      ]);
      lines.push(
        [
          'fairness (2 CPU hogs beside the server throughout): baseline, 1 MP probes (4 loops)',
          latency(baseline.flat()),
        ],
        ['  longest /api/public/health or /internal/live answer beside them', stall(quiet)],
        ["  the server's longest event-loop delay", loopStall(stallFile, from, Date.now())],
      );
    }
    if (CHOSEN.has('mix')) {
      // The largest allowed images, 8 at a time, each loop from its own address.
      samplePeak();
      end = performance.now() + seconds * 1000;
      const [probeAnswers, ...mix] = await Promise.all([
        loop(over, probe('10.1.0.1')),
        ...Array.from({ length: 8 }, (_, i) =>
          loop(over, () => post(url, largest[i % 4] as Buffer, types[i % 4] as string, `10.2.0.${i + 1}`)),
        ),
      ]);
      stopSampling();
      lines.push(
        ['1 MP probe beside 8 loops of the largest images', latency(probeAnswers ?? [])],
        ['  the largest images', tally(mix.flat())],
        [
          '  peak memory, server + decoders (PSS)',
          `${Math.round(peak / MiB)} MiB (at rest ${Math.round(rest / MiB)} MiB)`,
        ],
      );
    }
    if (CHOSEN.has('attacks')) {
      // Two loops of each scan-bound JPEG from one address, beside legitimate traffic.
      for (const [name, about] of ATTACKS) {
        const attack = await hostileImage(name);
        samplePeak();
        end = performance.now() + seconds * 1000;
        const [attacks, ...legit] = await Promise.all([
          Promise.all([1, 2].map(() => loop(over, () => post(url, attack, 'image/jpeg', '10.6.6.6')))).then(
            (a) => a.flat(),
          ),
          ...legitLoops('10.3.0'),
        ]);
        stopSampling();
        lines.push(
          [`attack: 1 MP probes (4 loops) beside 2 loops of the ${about}`, latency(legit.flat())],
          [
            '  the attack (one address)',
            `${tally(attacks)}; ${charged(attacks)} (${(attack.length / 1024).toFixed(0)} KiB each)`,
          ],
          [
            '  peak memory, server + decoders (PSS)',
            `${Math.round(peak / MiB)} MiB  (chart limit ${CHART_MEMORY_LIMIT_MIB} MiB; decode budget ${Math.round(config.concurrency.decodeBytes / MiB)} MiB)`,
          ],
        );
      }
    }
    if (CHOSEN.has('uploads')) {
      // Large legitimate uploads: 8 loops of 40–50 MB PNGs, each from its own address.
      end = performance.now() + seconds * 1000;
      from = Date.now();
      const [legitBeside, uploads] = await Promise.all([
        Promise.all(legitLoops('10.4.0')),
        uploadLoops(
          url,
          Array.from({ length: 8 }, (_, i) => bigFiles[i % 2] as string),
          'image/png',
          '10.5.0.',
          seconds * 1000,
        ),
      ]);
      lines.push(
        [
          `uploads: 1 MP probes (4 loops) beside 8 loops of ${bigPngs.map((b) => (b.length / 1e6).toFixed(0)).join('/')} MB PNGs`,
          latency(legitBeside.flat()),
        ],
        ['  the large PNGs (8 loops from another process)', tally(uploads)],
        ["  the server's longest event-loop delay", loopStall(stallFile, from, Date.now())],
      );
    }
    if (CHOSEN.has('walks')) {
      // Header walks: 4 concurrent loops of the 4.3 M-chunk PNG beside the health and liveness probes.
      end = performance.now() + seconds * 1000;
      from = Date.now();
      const chunkyFile = join(stallDir, 'chunky.png');
      writeFileSync(chunkyFile, chunky);
      const [asked, walks] = await Promise.all([
        healthProber(server.url, seconds * 1000),
        uploadLoops(
          url,
          [chunkyFile, chunkyFile, chunkyFile, chunkyFile],
          'image/png',
          '10.7.0.',
          seconds * 1000,
        ),
      ]);
      lines.push(
        [
          'walks: longest /api/public/health or /internal/live answer beside 4 loops of the 4.3 M-chunk PNG',
          stall(asked),
        ],
        ["  the server's longest event-loop delay", loopStall(stallFile, from, Date.now())],
        ['  the 4.3 M-chunk PNGs', `${tally(walks)} (${(chunky.length / 1e6).toFixed(0)} MB each)`],
      );
    }
    lines.push(['server alive at the end', String(server.proc.exitCode === null)]);
    return lines;
  } finally {
    clearInterval(sampler);
    for (const hog of hogs) hog.kill('SIGKILL');
    await server.stop();
    rmSync(stallDir, { recursive: true, force: true });
  }
}
