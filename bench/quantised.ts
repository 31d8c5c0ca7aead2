// The bench's `quantised` section: mobilenet_v2_int8 beside the float mobilenet_v2, in one run.
//   fidelity — |Δ scores.nsfw| (max, p99, median) and decisions flipped at the configured thresholds,
//              over the corpus images static quantisation did NOT calibrate on (models/quantise.ts);
//   speed    — inference-only images/s with 2 and 1 intra-op threads, and the real server end to end
//              at concurrency 8 (req/s, server CPU per request from the process tree's CPU time),
//              float and int8 interleaved round by round, medians reported.
//
//   npx tsx bench/quantised.ts                    this section alone
//   npx tsx bench/quantised.ts --variants <dir>   fidelity + inference speed of every recipe built with
//                                                 `tsx models/quantise.ts --variant <v> --out-dir <dir>/<v>`

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { QUANTISED_MODEL_SHIPS } from '../lib/common/model-catalogue.ts';
import { loadPolicyConfig } from '../lib/policy/policy-config.ts';
import { modelFile } from '../models/convert.ts';
import { type Fidelity, measureFidelity, median, SHIP_BOUND, withinShipBound } from '../models/fidelity.ts';
import {
  CALIBRATION_IMAGES,
  ensureInt8Model,
  INT8_MODEL,
  int8ModelFile,
  QUANTISE_COMMAND,
  QUANTISE_PYTHON,
} from '../models/quantise.ts';
import { toModelInput } from '../services/detect/image/decode.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { createOnnxClassifier, type OnnxClassifier } from '../services/detect/model/onnx-classifier.ts';
import { startServer } from '../test/support/server-process.ts';
import { closeLoadConnections, postOnce, runLoad } from './http-load.ts';
import { benchImages } from './images.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const ROUNDS = 5;
const fmt = (x: number, digits = 1) => x.toFixed(digits);

async function imagesPerSecond(classifier: OnnxClassifier, tensors: Float32Array[], seconds: number) {
  let count = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  while (performance.now() < deadline)
    await classifier.classify(tensors[count++ % tensors.length] as Float32Array);
  return count / ((performance.now() - started) / 1000);
}

/**
 * Inference-only images/s of each model file, interleaved: every round runs each model once, the
 * order alternating, so drift on this shared machine falls on all models alike. Medians of the rounds.
 */
export async function inferenceSpeeds(
  files: Record<string, string>,
  threads: number,
  tensors: Float32Array[],
  opts: { rounds?: number; seconds?: number } = {},
): Promise<Record<string, number>> {
  const names = Object.keys(files);
  const classifiers = await Promise.all(
    names.map((name) =>
      createOnnxClassifier({ model: 'mobilenet_v2', intraOpThreads: threads, modelPath: files[name] }),
    ),
  );
  const perRound: number[][] = names.map(() => []);
  try {
    for (const c of classifiers) for (const t of tensors) await c.classify(t); // warm-up
    for (let round = 0; round < (opts.rounds ?? ROUNDS); round++) {
      const order = names.map((_, i) => i);
      if (round % 2) order.reverse();
      for (const i of order) {
        perRound[i]?.push(
          await imagesPerSecond(classifiers[i] as OnnxClassifier, tensors, opts.seconds ?? 1.5),
        );
      }
    }
  } finally {
    await Promise.all(classifiers.map((c) => c.close()));
  }
  return Object.fromEntries(names.map((name, i) => [name, median(perRound[i] as number[])]));
}

/** utime + stime (seconds) of a process and all its descendants. */
function treeCpuSeconds(pid: number): number {
  let ticks = 0;
  const visit = (p: number) => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14, 15 of stat)
      for (const task of readdirSync(`/proc/${p}/task`)) {
        const children = readFileSync(`/proc/${p}/task/${task}/children`, 'utf8').trim();
        for (const c of children ? children.split(' ') : []) visit(Number(c));
      }
    } catch {
      // the process (or a child) ended meanwhile
    }
  };
  visit(pid);
  return ticks / 100; // USER_HZ is 100 on Linux
}

interface EndToEnd {
  perSecond: number;
  cpuMsPerRequest: number;
  p50: number;
  failures: number;
}

/** Both servers up at once, loaded one at a time (the other idles), ROUNDS interleaved rounds. */
async function endToEnd(seconds: number): Promise<Record<'float' | 'int8', EndToEnd>> {
  const images = await benchImages();
  const bodies = images.map((i) => i.jpeg);
  const env = { ANON_PER_MINUTE: '1000000', ANON_PER_DAY: '1000000', LOG_LEVEL: 'warn' };
  const servers = {
    float: await startServer({ ...env, MODEL: 'mobilenet_v2' }),
    int8: await startServer({ ...env, MODEL: INT8_MODEL, ALLOW_UNSHIPPED_MODELS: 'true' }),
  };
  const rounds: Record<'float' | 'int8', EndToEnd[]> = { float: [], int8: [] };
  try {
    for (const s of Object.values(servers)) {
      for (const body of bodies) await postOnce(`${s.url}/api/public/detect`, body, 'image/jpeg');
    }
    for (let round = 0; round < ROUNDS; round++) {
      const order: Array<'float' | 'int8'> = round % 2 ? ['int8', 'float'] : ['float', 'int8'];
      for (const which of order) {
        const server = servers[which];
        const pid = server.proc.pid as number;
        const cpuBefore = treeCpuSeconds(pid);
        const load = await runLoad({
          url: `${server.url}/api/public/detect`,
          bodies,
          contentType: 'image/jpeg',
          concurrency: 8,
          seconds,
        });
        const cpu = treeCpuSeconds(pid) - cpuBefore;
        rounds[which].push({
          perSecond: load.perSecond,
          cpuMsPerRequest: (cpu * 1000) / Math.max(1, load.requests),
          p50: load.p50,
          failures: load.failures,
        });
      }
    }
  } finally {
    closeLoadConnections();
    await Promise.all(Object.values(servers).map((s) => s.stop()));
  }
  const summary = (rs: EndToEnd[]): EndToEnd => ({
    perSecond: median(rs.map((r) => r.perSecond)),
    cpuMsPerRequest: median(rs.map((r) => r.cpuMsPerRequest)),
    p50: median(rs.map((r) => r.p50)),
    failures: rs.reduce((n, r) => n + r.failures, 0),
  });
  return { float: summary(rounds.float), int8: summary(rounds.int8) };
}

function fidelityLine(f: Fidelity): string {
  const flips = f.flips.length
    ? `${f.flips.length} flipped: ${f.flips.map((x) => `${x.image} ${fmt(x.float, 4)}→${fmt(x.int8, 4)}`).join(', ')}`
    : 'no decision flipped';
  return `max ${fmt(f.maxAbs, 4)}, p99 ${fmt(f.p99Abs, 4)}, median ${fmt(f.medianAbs, 4)} over ${f.images} images; ${flips}; worst ${f.worst}`;
}

/** The `quantised` section of `npm run bench`: printed lines, in run.ts's two-column style. */
export async function quantisedSection(): Promise<string[]> {
  const config = loadPolicyConfig(process.env);
  if (!existsSync(int8ModelFile()) && !existsSync(QUANTISE_PYTHON)) {
    return [
      `quantised: skipped — no models/${INT8_MODEL}.onnx and no quantisation venv (bash .ci/install-tools.sh, then ${QUANTISE_COMMAND})`,
    ];
  }
  const int8Path = await ensureInt8Model();
  const files = { float: modelFile('mobilenet_v2'), int8: int8Path };
  const fidelity = await measureFidelity(int8Path, config.thresholds);
  const tensors = await Promise.all((await benchImages()).map((i) => corpusTensorFromJpeg(i.jpeg)));
  const two = await inferenceSpeeds(files, 2, tensors);
  const one = await inferenceSpeeds(files, 1, tensors);
  const e2e = await endToEnd(SECONDS / 2);
  const ratio = (a: number, b: number) => `${fmt(a / b, 2)}×`;
  const lines: Array<[string, string]> = [
    [
      `int8 fidelity vs float, |Δ scores.nsfw| (thresholds ${config.thresholds.allow}/${config.thresholds.block})`,
      `${fidelityLine(fidelity)} (calibrated on ${CALIBRATION_IMAGES.length} other corpus images)`,
    ],
    [
      'inference only, 2 threads: float / int8',
      `${fmt(two.float as number)} / ${fmt(two.int8 as number)} images/s (int8 ${ratio(two.int8 as number, two.float as number)})`,
    ],
    [
      'inference only, 1 thread: float / int8',
      `${fmt(one.float as number)} / ${fmt(one.int8 as number)} images/s (int8 ${ratio(one.int8 as number, one.float as number)})`,
    ],
    [
      'HTTP concurrency 8, ~1 MP: float / int8',
      `${fmt(e2e.float.perSecond)} / ${fmt(e2e.int8.perSecond)} req/s (int8 ${ratio(e2e.int8.perSecond, e2e.float.perSecond)}); p50 ${fmt(e2e.float.p50)} / ${fmt(e2e.int8.p50)} ms; failures ${e2e.float.failures} / ${e2e.int8.failures}`,
    ],
    [
      'server CPU per request, ~1 MP: float / int8',
      `${fmt(e2e.float.cpuMsPerRequest)} / ${fmt(e2e.int8.cpuMsPerRequest)} ms (int8 ${ratio(e2e.int8.cpuMsPerRequest, e2e.float.cpuMsPerRequest)})`,
    ],
  ];
  const faster =
    e2e.int8.perSecond > e2e.float.perSecond && e2e.int8.cpuMsPerRequest < e2e.float.cpuMsPerRequest;
  lines.push([
    'int8 ships (MODEL offers it)',
    `${QUANTISED_MODEL_SHIPS ? 'yes' : 'no'}; bound max |Δ| ≤ ${SHIP_BOUND.maxAbs} and ${SHIP_BOUND.flips} flips: ${withinShipBound(fidelity) ? 'met' : 'missed'}; faster end to end in this run: ${faster ? 'yes' : 'no'}`,
  ]);
  const width = Math.max(...lines.map(([k]) => k.length));
  return [
    `quantised (${INT8_MODEL} vs mobilenet_v2; medians of ${ROUNDS} interleaved rounds)`,
    ...lines.map(([k, v]) => `${k.padEnd(width)}  ${v}`),
  ];
}

/** The server's model input for a bench JPEG. */
async function corpusTensorFromJpeg(jpeg: Buffer): Promise<Float32Array> {
  return (await toModelInput(jpeg, probeHeader(jpeg, await sniffFormat(jpeg)), 224)).tensor;
}

/** Every recipe under `dir` (one sub-directory per variant) against the float model. */
async function compareVariants(dir: string): Promise<void> {
  const config = loadPolicyConfig(process.env);
  const variants = readdirSync(dir).filter((v) => existsSync(path.join(dir, v, `${INT8_MODEL}.onnx`)));
  const files: Record<string, string> = { float: modelFile('mobilenet_v2') };
  for (const v of variants) files[v] = path.join(dir, v, `${INT8_MODEL}.onnx`);
  const tensors = await Promise.all((await benchImages()).map((i) => corpusTensorFromJpeg(i.jpeg)));
  const two = await inferenceSpeeds(files, 2, tensors, { seconds: 1 });
  const one = await inferenceSpeeds(files, 1, tensors, { seconds: 1 });
  console.log(`variant | 2 threads img/s | 1 thread img/s | fidelity`);
  console.log(`float | ${fmt(two.float as number)} | ${fmt(one.float as number)} | —`);
  for (const v of variants) {
    const f = await measureFidelity(files[v] as string, config.thresholds);
    console.log(`${v} | ${fmt(two[v] as number)} | ${fmt(one[v] as number)} | ${fidelityLine(f)}`);
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--variants');
  if (at >= 0) await compareVariants(path.resolve(process.argv[at + 1] ?? '.'));
  else for (const line of await quantisedSection()) console.log(line);
}
