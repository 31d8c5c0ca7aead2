// npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05]
// Scores two labelled folders through the detect pipeline, one image at a time (only the scores are
// kept), with a progress bar and ETA on stderr, then writes the report folder (report.ts).

import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { suggestThresholds, thresholdTable } from './metrics.ts';
import { type Failure, writeReport } from './report.ts';
import { createFileScorer, loadCalibrateConfig } from './score-image.ts';
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
  'usage: npm run calibrate -- --nsfw DIR --sfw DIR --out REPORT_DIR [--target-false-block 0.01] [--target-miss 0.05]';

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      nsfw: { type: 'string' },
      sfw: { type: 'string' },
      out: { type: 'string' },
      'target-false-block': { type: 'string' },
      'target-miss': { type: 'string' },
    },
  });
  if (!values.nsfw || !values.sfw || !values.out) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const targetFalseBlock = rate('target-false-block', values['target-false-block'], 0.01);
  const targetMiss = rate('target-miss', values['target-miss'], 0.05);
  const config = loadCalibrateConfig(process.env);
  await mkdir(values.out, { recursive: true });
  const total = (await count(values.nsfw)) + (await count(values.sfw));
  const scorer = await createFileScorer(config);
  const csv = createWriteStream(path.join(values.out, 'scores.csv'));
  csv.write('label,file,nsfw,error_code\n');
  const scores = { nsfw: [] as number[], sfw: [] as number[] };
  const failures: Failure[] = [];
  const started = performance.now();
  const tty = process.stderr.isTTY;
  let done = 0;
  try {
    for (const [label, dir] of [
      ['nsfw', values.nsfw],
      ['sfw', values.sfw],
    ] as const) {
      for await (const file of walk(dir)) {
        const outcome = await scorer.score(file);
        const rel = path.relative(dir, file);
        if ('nsfw' in outcome) {
          scores[label].push(outcome.nsfw);
          csv.write(`${label},${JSON.stringify(rel)},${outcome.nsfw},\n`);
        } else {
          failures.push({ file: path.join(label, rel), label, code: outcome.code, message: outcome.message });
          csv.write(`${label},${JSON.stringify(rel)},,${outcome.code}\n`);
        }
        done++;
        // A redrawn bar on a terminal; a line per 5 % in a log.
        if (tty) process.stderr.write(`\r${progress(done, total, started)}`);
        else if (done === total || done % Math.max(1, Math.round(total / 20)) === 0) {
          process.stderr.write(`${progress(done, total, started)}\n`);
        }
      }
    }
  } finally {
    if (tty) process.stderr.write('\n');
    await scorer.close();
    await new Promise<void>((resolve, reject) =>
      csv.end((err?: Error | null) => (err ? reject(err) : resolve())),
    );
  }
  for (const f of failures) process.stderr.write(`not decodable: ${f.file}: ${f.code} ${f.message}\n`);
  const table = thresholdTable(scores.nsfw, scores.sfw);
  const suggestion = suggestThresholds(table, targetFalseBlock, targetMiss);
  const index = await writeReport({
    outDir: values.out,
    model: config.model,
    nsfwDir: values.nsfw,
    sfwDir: values.sfw,
    nsfw: scores.nsfw,
    sfw: scores.sfw,
    failures,
    table,
    suggestion,
    targetFalseBlock,
    targetMiss,
  });
  process.stdout.write(
    `scored ${scores.nsfw.length} nsfw + ${scores.sfw.length} sfw, ${failures.length} not decodable\n` +
      `suggested: THRESHOLD_ALLOW=${suggestion.allow} THRESHOLD_BLOCK=${suggestion.block}\nreport: ${index}\n`,
  );
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
