// npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05]
//                       [--models a,b,a+b [--target-review 0.2]]
// Scores two labelled folders through the detect pipeline, one image at a time (only the scores are
// kept), with a progress bar and ETA on stderr, then writes the report folder (report.ts). With
// --models, once per model: each model's report goes to a subfolder named after it, and the comparison
// with the recommended model and thresholds to the folder itself (compare.ts, compare-report.ts).

import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  type ModelChoice,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../../lib/policy/model-catalogue.ts';
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

function rate(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0 || v > 1)
    throw new Error(`--${name} must be a number in [0, 1], got ${raw}`);
  return v;
}

const USAGE =
  'usage: npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05] [--models a,b,a+b [--target-review 0.2]]';

interface Progress {
  done: number;
  total: number;
  started: number;
}

interface ModelScores {
  nsfw: number[];
  sfw: number[];
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
  const result: ModelScores = { nsfw: [], sfw: [], failures: [], cpuMs: 0 };
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
  const { values } = parseArgs({
    args: argv,
    options: {
      nsfw: { type: 'string' },
      sfw: { type: 'string' },
      out: { type: 'string' },
      'target-false-block': { type: 'string' },
      'target-miss': { type: 'string' },
      'target-review': { type: 'string' },
      models: { type: 'string' },
    },
  });
  if (!values.nsfw || !values.sfw || !values.out) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const dirs = { nsfw: values.nsfw, sfw: values.sfw };
  const targetFalseBlock = rate('target-false-block', values['target-false-block'], 0.01);
  const targetMiss = rate('target-miss', values['target-miss'], 0.05);
  const config = loadCalibrateConfig(process.env);
  if (values.models === undefined && values['target-review'] !== undefined) {
    throw new Error('--target-review applies to a comparison: give --models too');
  }
  const models = (values.models?.split(',').map((m) => m.trim()) ?? [config.model]) as ModelChoice[];
  for (const m of values.models === undefined ? [] : models) {
    const problem = modelChoiceProblem(m, OFFERED_MODEL_NAMES);
    if (problem) {
      process.stderr.write(`--models: ${problem}\n${USAGE}\n`);
      return 2;
    }
  }
  if (new Set(models).size !== models.length) throw new Error('--models names each choice once');
  await mkdir(values.out, { recursive: true });
  const bar = {
    done: 0,
    total: ((await count(dirs.nsfw)) + (await count(dirs.sfw))) * models.length,
    started: performance.now(),
  };

  // One model's thresholds fitted on its scores, and its report written (index.html's path returned).
  const report = async (
    run: { nsfw: number[]; sfw: number[]; failures: readonly Failure[] },
    outDir: string,
    model: string,
    nameModel: boolean,
  ) => {
    const table = thresholdTable(run.nsfw, run.sfw);
    const suggestion = suggestThresholds(table, targetFalseBlock, targetMiss);
    const index = await writeReport({
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
    return { suggestion, index };
  };

  if (values.models === undefined) {
    const run = await scoreFolders(config, dirs, values.out, bar);
    for (const f of run.failures) process.stderr.write(`not decodable: ${f.file}: ${f.code} ${f.message}\n`);
    const { suggestion, index } = await report(run, values.out, config.model, false);
    process.stdout.write(
      `scored ${run.nsfw.length} nsfw + ${run.sfw.length} sfw, ${run.failures.length} not decodable\n` +
        `suggested: THRESHOLD_ALLOW=${suggestion.allow} THRESHOLD_BLOCK=${suggestion.block}\nreport: ${index}\n`,
    );
    return 0;
  }

  const targets = {
    falseBlock: targetFalseBlock,
    miss: targetMiss,
    review: rate('target-review', values['target-review'], 0.2),
  };
  const rows: ModelComparison[] = [];
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
  const index = await writeComparison({
    outDir: values.out,
    nsfwDir: dirs.nsfw,
    sfwDir: dirs.sfw,
    targets,
    rows,
    recommendation,
  });
  const best = recommendation.choice;
  process.stdout.write(
    `${rows
      .map(
        (r) =>
          `${r.model}: AUC ${r.auc.auc.toFixed(4)} [${r.auc.low.toFixed(4)}, ${r.auc.high.toFixed(4)}], allow ${r.suggestion.allow} block ${r.suggestion.block}, review ${(r.reviewRate * 100).toFixed(1)} %, ${r.cpuMsPerImage.toFixed(1)} ms CPU/image${r.missed.length ? `, misses ${r.missed.join(', ')}` : ''}`,
      )
      .join('\n')}\n` +
      `recommended: MODEL=${best.model} THRESHOLD_ALLOW=${best.suggestion.allow} THRESHOLD_BLOCK=${best.suggestion.block} (${recommendation.reason})\nreport: ${index}\n`,
  );
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
