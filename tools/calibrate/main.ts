// npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05]
//                       [--models a,b,a+b [--target-review 0.2]] [--min-images 30] [--max-review 0.5] [--force]
// Scores two labelled folders through the detect pipeline, one image at a time (only the scores are
// kept), with a progress bar and ETA on stderr, then writes the report folder (report.ts). With
// --models, once per model: each model's report goes to a subfolder named after it, and the comparison
// with the recommended model and thresholds to the folder itself (compare.ts, compare-report.ts).
// Advice the data does not support (advice.ts: too few images, a point that allows nothing, blocks
// everything or sends too much to review) is flagged, and its deployable files are written only with
// --force (exit 1 without). Every argument error is one line and exit 2.

import { createWriteStream } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  type ModelChoice,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../../lib/common/model-catalogue.ts';
import { type AdviceLimits, adviceProblems, DEFAULT_ADVICE, operatingPoint, type Problem } from './advice.ts';
import { compareModel, type ModelComparison, recommend } from './compare.ts';
import { writeComparison } from './compare-report.ts';
import { suggestThresholds, thresholdTable } from './metrics.ts';
import { type Failure, writeReport } from './report.ts';
import { type CalibrateConfig, createFileScorer, loadCalibrateConfig } from './score-image.ts';
import { count, walk } from './walk.ts';

function progress(done: number, total: number, startedMs: number): string {
  const width = 30;
  const filled = total ? Math.round((done / total) * width) : width;
  const elapsed = (performance.now() - startedMs) / 1000;
  const eta = done ? (elapsed / done) * (total - done) : 0;
  const fmt = (s: number) => `${Math.floor(s / 60)}:${String(Math.round(s % 60)).padStart(2, '0')}`;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${fmt(elapsed)} elapsed, ETA ${fmt(eta)}`;
}

/** A mistake in the arguments: one line on stderr, exit 2. */
class UsageError extends Error {}

function rate(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0 || v > 1)
    throw new UsageError(`--${name} must be a number in [0, 1], got ${raw}`);
  return v;
}

function wholeNumber(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < 1)
    throw new UsageError(`--${name} must be a whole number of at least 1, got ${raw}`);
  return v;
}

async function folder(option: string, dir: string | undefined): Promise<string> {
  if (!dir) throw new UsageError(`--${option} DIR is required (a folder of ${option.toUpperCase()} images)`);
  const found = await stat(dir).catch(() => undefined);
  if (!found) throw new UsageError(`--${option} ${dir}: no such folder`);
  if (!found.isDirectory()) throw new UsageError(`--${option} ${dir}: not a folder`);
  return dir;
}

const USAGE =
  'usage: npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05] [--models a,b,a+b [--target-review 0.2]] [--min-images 30] [--max-review 0.5] [--force]';

interface Progress {
  done: number;
  total: number;
  started: number;
}

interface ModelScores {
  nsfw: number[];
  sfw: number[];
  /** The files of `nsfw` and `sfw`, in the same order (the report's thumbnails). */
  files: { nsfw: string[]; sfw: string[] };
  failures: Failure[];
  cpuMs: number;
}

/** Scores both folders with one model into `outDir`/scores.csv, and the CPU time it took. */
async function scoreFolders(
  config: CalibrateConfig,
  dirs: { nsfw: string; sfw: string },
  outDir: string,
  bar: Progress,
): Promise<ModelScores> {
  const scorer = await createFileScorer(config);
  const csv = createWriteStream(path.join(outDir, 'scores.csv'));
  csv.write('label,file,nsfw,error_code\n');
  const result: ModelScores = { nsfw: [], sfw: [], files: { nsfw: [], sfw: [] }, failures: [], cpuMs: 0 };
  const tty = process.stderr.isTTY;
  try {
    // One untimed image first: the model's first run (and the code's first) costs more than the rest.
    const first = await walk(dirs.nsfw).next();
    if (!first.done) await scorer.score(first.value);
    const cpuBefore = process.cpuUsage();
    for (const label of ['nsfw', 'sfw'] as const) {
      const dir = dirs[label];
      for await (const file of walk(dir)) {
        const outcome = await scorer.score(file);
        const rel = path.relative(dir, file);
        if ('nsfw' in outcome) {
          result[label].push(outcome.nsfw);
          result.files[label].push(file);
          csv.write(`${label},${JSON.stringify(rel)},${outcome.nsfw},\n`);
        } else {
          result.failures.push({
            file: path.join(label, rel),
            label,
            code: outcome.code,
            message: outcome.message,
          });
          csv.write(`${label},${JSON.stringify(rel)},,${outcome.code}\n`);
        }
        bar.done++;
        // A redrawn bar on a terminal; a line per 5 % in a log.
        if (tty) process.stderr.write(`\r${progress(bar.done, bar.total, bar.started)}`);
        else if (bar.done === bar.total || bar.done % Math.max(1, Math.round(bar.total / 20)) === 0) {
          process.stderr.write(`${progress(bar.done, bar.total, bar.started)}\n`);
        }
      }
    }
    const cpu = process.cpuUsage(cpuBefore);
    result.cpuMs = (cpu.user + cpu.system) / 1000;
  } finally {
    if (tty) process.stderr.write('\n');
    await scorer.close();
    await new Promise<void>((resolve, reject) =>
      csv.end((err?: Error | null) => (err ? reject(err) : resolve())),
    );
  }
  return result;
}

export async function main(argv: string[]): Promise<number> {
  try {
    return await calibrate(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`calibrate: ${err.message}\n`);
    return 2;
  }
}

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      options: {
        nsfw: { type: 'string' },
        sfw: { type: 'string' },
        out: { type: 'string' },
        'target-false-block': { type: 'string' },
        'target-miss': { type: 'string' },
        'target-review': { type: 'string' },
        models: { type: 'string' },
        'min-images': { type: 'string' },
        'max-review': { type: 'string' },
        force: { type: 'boolean', default: false },
      },
    });
  } catch (err) {
    // parseArgs names the unknown option or the missing value.
    throw new UsageError(`${(err as Error).message} (${USAGE})`);
  }
}

async function calibrate(argv: string[]): Promise<number> {
  const { values } = parse(argv);
  const dirs = { nsfw: await folder('nsfw', values.nsfw), sfw: await folder('sfw', values.sfw) };
  if (!values.out) throw new UsageError('--out REPORT_DIR is required (the folder the report is written to)');
  const limits: AdviceLimits = {
    minPerLabel: wholeNumber('min-images', values['min-images'], DEFAULT_ADVICE.minPerLabel),
    maxReview: rate('max-review', values['max-review'], DEFAULT_ADVICE.maxReview),
  };
  const force = values.force ?? false;
  const targetFalseBlock = rate('target-false-block', values['target-false-block'], 0.01);
  const targetMiss = rate('target-miss', values['target-miss'], 0.05);
  const config = loadCalibrateConfig(process.env);
  if (values.models === undefined && values['target-review'] !== undefined) {
    throw new UsageError('--target-review applies to a comparison: give --models too');
  }
  const models = (values.models?.split(',').map((m) => m.trim()) ?? [config.model]) as ModelChoice[];
  for (const m of values.models === undefined ? [] : models) {
    const problem = modelChoiceProblem(m, OFFERED_MODEL_NAMES);
    if (problem) throw new UsageError(`--models: ${problem}`);
  }
  if (new Set(models).size !== models.length) throw new UsageError('--models names each choice once');
  await mkdir(values.out, { recursive: true });
  const bar = {
    done: 0,
    total: ((await count(dirs.nsfw)) + (await count(dirs.sfw))) * models.length,
    started: performance.now(),
  };

  // One model's thresholds fitted on its scores, and its report written (index.html's path returned).
  const report = async (run: ModelScores, outDir: string, model: string, nameModel: boolean) => {
    const table = thresholdTable(run.nsfw, run.sfw);
    const suggestion = suggestThresholds(table, targetFalseBlock, targetMiss);
    const problems = adviceProblems(run.nsfw, run.sfw, suggestion, limits);
    const index = await writeReport({
      advice: { problems, point: operatingPoint(run.nsfw, run.sfw, suggestion), limits, force },
      files: run.files,
      outDir,
      model,
      nameModel,
      nsfwDir: dirs.nsfw,
      sfwDir: dirs.sfw,
      nsfw: run.nsfw,
      sfw: run.sfw,
      failures: run.failures,
      table,
      suggestion,
      targetFalseBlock,
      targetMiss,
    });
    return { suggestion, index, problems };
  };
  /** Tells what is flagged; the exit code: 1 when flagged advice got no deployable file. */
  const flag = (problems: readonly Problem[], whose: string): number => {
    for (const p of problems) process.stderr.write(`flagged${whose}: ${p.message}\n`);
    if (!problems.length) return 0;
    process.stderr.write(
      force
        ? `flagged${whose}: deployable files written anyway (--force)\n`
        : `flagged${whose}: no values.yaml, thresholds.env or detection-policy.yaml written (--force writes them)\n`,
    );
    return force ? 0 : 1;
  };

  if (values.models === undefined) {
    const run = await scoreFolders(config, dirs, values.out, bar);
    for (const f of run.failures) process.stderr.write(`not decodable: ${f.file}: ${f.code} ${f.message}\n`);
    const { suggestion, index, problems } = await report(run, values.out, config.model, false);
    process.stdout.write(
      `scored ${run.nsfw.length} nsfw + ${run.sfw.length} sfw, ${run.failures.length} not decodable\n` +
        `suggested: THRESHOLD_ALLOW=${suggestion.allow} THRESHOLD_BLOCK=${suggestion.block}\nreport: ${index}\n`,
    );
    return flag(problems, '');
  }

  const targets = {
    falseBlock: targetFalseBlock,
    miss: targetMiss,
    review: rate('target-review', values['target-review'], 0.2),
  };
  const rows: ModelComparison[] = [];
  const curves: Array<{ model: string; nsfw: readonly number[]; sfw: readonly number[] }> = [];
  for (const [i, model] of models.entries()) {
    const modelDir = path.join(values.out, model);
    await mkdir(modelDir, { recursive: true });
    const run = await scoreFolders({ ...config, model }, dirs, modelDir, bar);
    // Refusals come before any model: told once, by the first.
    if (i === 0) {
      for (const f of run.failures)
        process.stderr.write(`not decodable: ${f.file}: ${f.code} ${f.message}\n`);
    }
    await report(run, modelDir, model, true);
    curves.push({ model, nsfw: run.nsfw, sfw: run.sfw });
    const scored = run.nsfw.length + run.sfw.length;
    rows.push(
      compareModel(
        {
          model,
          nsfw: run.nsfw,
          sfw: run.sfw,
          failures: run.failures.length,
          cpuMsPerImage: scored ? run.cpuMs / scored : Number.NaN,
        },
        targets,
      ),
    );
  }
  const recommendation = recommend(rows);
  const best = recommendation.choice;
  const bestRun = curves.find((c) => c.model === best.model) ?? { nsfw: [], sfw: [] };
  const problems = adviceProblems(bestRun.nsfw, bestRun.sfw, best.suggestion, limits);
  const index = await writeComparison({
    outDir: values.out,
    nsfwDir: dirs.nsfw,
    sfwDir: dirs.sfw,
    targets,
    rows,
    recommendation,
    curves,
    advice: { problems, force },
  });
  process.stdout.write(
    `${rows
      .map(
        (r) =>
          `${r.model}: AUC ${r.auc.auc.toFixed(4)} [${r.auc.low.toFixed(4)}, ${r.auc.high.toFixed(4)}], allow ${r.suggestion.allow} block ${r.suggestion.block}, review ${(r.reviewRate * 100).toFixed(1)} %, ${r.cpuMsPerImage.toFixed(1)} ms CPU/image${r.missed.length ? `, misses ${r.missed.join(', ')}` : ''}`,
      )
      .join('\n')}\n` +
      `recommended: MODEL=${best.model} THRESHOLD_ALLOW=${best.suggestion.allow} THRESHOLD_BLOCK=${best.suggestion.block} (${recommendation.reason})\nreport: ${index}\n`,
  );
  return flag(problems, ` (${best.model})`);
}

process.exitCode = await main(process.argv.slice(2));
