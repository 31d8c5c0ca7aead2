// npm run robustness -- --dir IMAGES [--models mobilenet_v2,inception_v3,open_nsfw] [--limit N] [--min-edge PX]
// Re-encodes every image of a folder in the ways of variants.ts, scores the original and each
// re-encoding through the detect pipeline (score-image.ts) with each model, and prints per model the
// share of decisions (THRESHOLD_ALLOW / THRESHOLD_BLOCK) left unchanged and the largest change of
// scores.nsfw. Images the service refuses, or that sharp cannot re-encode, are counted and left out;
// so are, with --min-edge, images whose shorter upright edge is below it (on a 2 × 1 image a border or
// half size is a different picture, not a harmless change).

import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  type ModelChoice,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../../lib/common/model-catalogue.ts';
import { RobustnessTally, robustnessTable } from './robustness.ts';
import { createFileScorer, loadCalibrateConfig } from './score-image.ts';
import { decodeUpright, VARIANTS } from './variants.ts';
import { walk } from './walk.ts';

const USAGE =
  'usage: npm run robustness -- --dir IMAGES [--models mobilenet_v2,inception_v3,open_nsfw] [--limit N] [--min-edge PX]';

export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      dir: { type: 'string' },
      models: { type: 'string' },
      limit: { type: 'string' },
      'min-edge': { type: 'string' },
    },
  });
  if (!values.dir) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const models = (values.models ?? 'mobilenet_v2,inception_v3,open_nsfw').split(',').map((m) => m.trim());
  for (const m of models) {
    const problem = modelChoiceProblem(m, OFFERED_MODEL_NAMES);
    if (problem) {
      process.stderr.write(`--models: ${problem}\n${USAGE}\n`);
      return 2;
    }
  }
  const limit = values.limit === undefined ? Number.POSITIVE_INFINITY : Number(values.limit);
  if (!Number.isInteger(limit) && limit !== Number.POSITIVE_INFINITY) {
    throw new Error(`--limit must be a whole number, got ${values.limit}`);
  }
  const minEdge = Number(values['min-edge'] ?? 0);
  if (!Number.isInteger(minEdge) || minEdge < 0) {
    process.stderr.write(
      `--min-edge must be a whole number of pixels, got ${values['min-edge']}\n${USAGE}\n`,
    );
    return 2;
  }
  const config = loadCalibrateConfig(process.env);
  const work = await mkdtemp(path.join(tmpdir(), 'nsfwdetector-robustness-'));
  try {
    // The re-encodings are made once, on disk, and scored by each model in turn.
    const images: { file: string; name: string; dir: string }[] = [];
    const notReencoded: string[] = [];
    const small: string[] = [];
    for await (const file of walk(values.dir)) {
      if (images.length >= limit) break;
      const name = path.relative(values.dir, file);
      let pixels: Awaited<ReturnType<typeof decodeUpright>>;
      try {
        pixels = await decodeUpright(await readFile(file));
      } catch {
        notReencoded.push(name);
        continue;
      }
      if (Math.min(pixels.width, pixels.height) < minEdge) {
        small.push(name);
        continue;
      }
      const dir = path.join(work, String(images.length));
      await mkdir(dir);
      for (const v of VARIANTS) await writeFile(path.join(dir, v.name), await v.encode(pixels));
      images.push({ file, name, dir });
    }
    process.stderr.write(
      `${images.length} images re-encoded ${VARIANTS.length} ways; sharp could not read ${notReencoded.length}${notReencoded.length ? `: ${notReencoded.join(', ')}` : ''}` +
        `${minEdge ? `; ${small.length} left out, an edge under ${minEdge} px${small.length ? `: ${small.join(', ')}` : ''}` : ''}\n`,
    );
    const tally = new RobustnessTally(config.thresholds);
    const refusedOriginals = new Map<string, number>();
    for (const model of models as ModelChoice[]) {
      const scorer = await createFileScorer({ ...config, model });
      let refused = 0;
      try {
        for (const img of images) {
          const original = await scorer.score(img.file);
          if (!('nsfw' in original)) {
            refused++;
            continue;
          }
          for (const v of VARIANTS) {
            const outcome = await scorer.score(path.join(img.dir, v.name));
            tally.add(model, v.name, img.name, original.nsfw, 'nsfw' in outcome ? outcome.nsfw : undefined);
          }
        }
      } finally {
        await scorer.close();
      }
      refusedOriginals.set(model, refused);
      process.stderr.write(`${model}: done\n`);
    }
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    const scoredOriginals = models.map((m) => `${m} ${images.length - (refusedOriginals.get(m) ?? 0)}`);
    process.stdout.write(
      `Robustness of the moderation decision (allow < ${config.thresholds.allow} <= review < ${config.thresholds.block} <= block) over ${values.dir}\n` +
        `${minEdge ? `images with both edges >= ${minEdge} px; ` : ''}originals scored: ${scoredOriginals.join(', ')}; CPU: ${cpu}\n\n` +
        robustnessTable(tally) +
        `\n${VARIANTS.map((v) => `- ${v.name}: ${v.what}`).join('\n')}\n`,
    );
    return 0;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

process.exitCode = await main(process.argv.slice(2));
