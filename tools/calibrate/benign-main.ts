// npm run calibrate:benign [-- --models mobilenet_v2,open_nsfw] [--check] [--write]
// Scores the benign corpus (benign-corpus.ts: real photographs from Debian packages) through the detect
// pipeline (score-image.ts) with each model and prints each one's allow / review / block shares at the
// thresholds in force (THRESHOLD_ALLOW / THRESHOLD_BLOCK): a block here is a false block. `--write`
// records them in benign-baseline.json; `--check` fails (exit 1) when a model blocks more of the corpus
// than the record says, or the corpus is not the one recorded — the CI check (benign.test.ts).

import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import {
  type ModelChoice,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../../lib/common/model-catalogue.ts';
import { BENIGN_SOURCES, benignImages } from './benign-corpus.ts';
import { createFileScorer, loadCalibrateConfig } from './score-image.ts';

const BASELINE = fileURLToPath(new URL('./benign-baseline.json', import.meta.url));
const DEFAULT_MODELS: readonly string[] = [...OFFERED_MODEL_NAMES, 'mobilenet_v2+open_nsfw'];

export interface BenignShares {
  images: number;
  allow: number;
  review: number;
  block: number;
  refused: number;
  /** The images blocked, by source and name inside the package. */
  blocked: string[];
}

export interface BenignBaseline {
  images: number;
  thresholds: { allow: number; block: number };
  models: Record<string, BenignShares>;
}

export async function scoreBenign(models: readonly ModelChoice[]): Promise<BenignBaseline> {
  const config = loadCalibrateConfig(process.env);
  const images = await benignImages();
  const result: BenignBaseline = { images: images.length, thresholds: config.thresholds, models: {} };
  for (const model of models) {
    const scorer = await createFileScorer({ ...config, model });
    const shares: BenignShares = {
      images: images.length,
      allow: 0,
      review: 0,
      block: 0,
      refused: 0,
      blocked: [],
    };
    try {
      for (const image of images) {
        const outcome = await scorer.score(image.file);
        if (!('nsfw' in outcome)) shares.refused++;
        else if (outcome.nsfw < config.thresholds.allow) shares.allow++;
        else if (outcome.nsfw < config.thresholds.block) shares.review++;
        else {
          shares.block++;
          shares.blocked.push(`${image.source}: ${path.basename(image.file)} (${outcome.nsfw.toFixed(3)})`);
        }
      }
    } finally {
      await scorer.close();
    }
    result.models[model] = shares;
  }
  return result;
}

const pct = (n: number, of: number): string => `${((100 * n) / Math.max(1, of)).toFixed(1)} %`;

export function benignTable(b: BenignBaseline): string {
  const rows = Object.entries(b.models).map(
    ([m, s]) =>
      `| ${m} | ${s.images - s.refused} | ${pct(s.allow, s.images - s.refused)} | ${pct(s.review, s.images - s.refused)} | ${pct(s.block, s.images - s.refused)} (${s.block}) |`,
  );
  return [
    `| model | images scored | allow | review | block (false blocks) |`,
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows,
  ].join('\n');
}

/** Why `now` is worse than `baseline`: a model that blocks more, or a different corpus; [] when not. */
export function benignRegressions(baseline: BenignBaseline, now: BenignBaseline): string[] {
  const problems: string[] = [];
  if (now.images !== baseline.images) {
    problems.push(`the corpus has ${now.images} images, the record ${baseline.images}: rerun with --write`);
  }
  for (const [model, shares] of Object.entries(now.models)) {
    const before = baseline.models[model];
    if (!before) problems.push(`${model}: not in the record (rerun with --write)`);
    else if (shares.block > before.block) {
      const added = shares.blocked.filter(
        (b) => !before.blocked.some((x) => x.split(' (')[0] === b.split(' (')[0]),
      );
      problems.push(
        `${model}: blocks ${shares.block} benign images, the record ${before.block}: ${added.join('; ')}`,
      );
    }
  }
  return problems;
}

export function readBaseline(): BenignBaseline {
  return JSON.parse(readFileSync(BASELINE, 'utf8')) as BenignBaseline;
}

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { models: { type: 'string' }, check: { type: 'boolean' }, write: { type: 'boolean' } },
  });
  const models = (values.models?.split(',').map((m) => m.trim()) ??
    (values.check ? Object.keys(readBaseline().models) : DEFAULT_MODELS)) as ModelChoice[];
  for (const m of models) {
    const problem = modelChoiceProblem(m, OFFERED_MODEL_NAMES);
    if (problem) {
      process.stderr.write(`--models: ${problem}\n`);
      return 2;
    }
  }
  const started = performance.now();
  const result = await scoreBenign(models);
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  process.stdout.write(
    `False blocks on the benign corpus (${result.images} images from ${BENIGN_SOURCES.length} Debian packages; allow < ${result.thresholds.allow} <= review < ${result.thresholds.block} <= block), ${seconds} s on ${cpus()[0]?.model ?? 'unknown CPU'}\n\n${benignTable(result)}\n`,
  );
  for (const [m, s] of Object.entries(result.models)) {
    if (s.blocked.length) process.stdout.write(`\n${m} blocks: ${s.blocked.join('; ')}\n`);
  }
  if (values.write) {
    writeFileSync(BASELINE, `${JSON.stringify(result, null, 2)}\n`);
    // In the repository's own format, so that the lint passes on the record as written.
    execFileSync('npx', ['biome', 'format', '--write', BASELINE], { stdio: 'inherit' });
  }
  if (values.check) {
    const problems = benignRegressions(readBaseline(), result);
    for (const p of problems) process.stderr.write(`calibrate:benign --check: ${p}\n`);
    return problems.length ? 1 : 0;
  }
  return 0;
}

// Run as a script (npm run calibrate:benign); imported by benign.test.ts.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href)
  process.exitCode = await main(process.argv.slice(2));
