// `npm run calibrate -- --models …` end to end: two labelled folders built from the shared corpus
// (labels of our choosing: what is checked is the tool, not a model's accuracy), the real CLI with
// two models and their ensemble. Each model's scores are in its subfolder; the ensemble's are the mean
// of its members' (each model really ran); the side-by-side figures and the recommendation are the
// rules of tools/calibrate/compare.ts (tested there on hand-made scores) applied to what was scored,
// and the top-level files deploy the recommended model with its thresholds.

import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareModel, type ModelComparison, recommend, type Targets } from '../tools/calibrate/compare.ts';
import { labelledCorpus } from './fixtures/corpus.ts';
import { calibrateCli, calibrateCorpus } from './support/calibrate-cli.ts';

const NSFW = ['320x240.jpg', '4.webp', 'Crash_test.gif', 'corrupt-header.jpg'];
const SFW = ['Flag_of_the_Netherlands.png', '2x2_fdcce6.png', '5_webp_a.webp'];
const MODELS = ['mobilenet_v2', 'open_nsfw', 'mobilenet_v2+open_nsfw'];
const TARGETS: Targets = { falseBlock: 0.34, miss: 0.34, review: 0.5 };

let work: string;
let out: string;
let stdout = '';
let stderr = '';

/** A model's scores.csv: file → score (undefined when refused), by label. */
function scoresOf(model: string): Map<string, number | undefined> {
  const rows = new Map<string, number | undefined>();
  for (const line of readFileSync(join(out, model, 'scores.csv'), 'utf8')
    .trim()
    .split('\n')
    .slice(1)) {
    const [label, file, nsfw] = line.split(',');
    rows.set(`${label}/${JSON.parse(file as string)}`, nsfw ? Number(nsfw) : undefined);
  }
  return rows;
}

beforeAll(async () => {
  work = labelledCorpus('nsfwdetector-calibrate-compare-', { nsfw: NSFW, sfw: SFW });
  // Too few images for advice (tools/calibrate/advice.ts): --force writes the files these checks read.
  const result = await calibrateCorpus(work, [
    '--force',
    '--models',
    MODELS.join(','),
    '--target-false-block',
    String(TARGETS.falseBlock),
    '--target-miss',
    String(TARGETS.miss),
    '--target-review',
    String(TARGETS.review),
  ]);
  ({ stdout, stderr, out } = result);
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('npm run calibrate -- --models', () => {
  it("scores every file once per model, each in its own report; the ensemble's score is its members' mean", () => {
    const scores = Object.fromEntries(MODELS.map((m) => [m, scoresOf(m)]));
    for (const m of MODELS) {
      expect([...(scores[m]?.keys() ?? [])].sort(), m).toEqual(
        [...NSFW.map((n) => `nsfw/${n}`), ...SFW.map((n) => `sfw/${n}`)].sort(),
      );
      expect(scores[m]?.get('nsfw/corrupt-header.jpg'), m).toBeUndefined();
      expect(existsSync(join(out, m, 'index.html')), m).toBe(true);
    }
    for (const [key, ensemble] of scores['mobilenet_v2+open_nsfw'] ?? []) {
      if (ensemble === undefined) continue;
      const a = scores.mobilenet_v2?.get(key) as number;
      const b = scores.open_nsfw?.get(key) as number;
      expect(ensemble, key).toBeCloseTo((a + b) / 2, 9);
    }
    // The two models disagree somewhere (they are not one model run three times).
    expect(
      [...(scores.mobilenet_v2 ?? [])].some(([k, v]) => v !== undefined && v !== scores.open_nsfw?.get(k)),
    ).toBe(true);
    // Each model's own deployment files name it; the DetectionPolicy only where its CRD can.
    for (const m of MODELS) {
      expect(readFileSync(join(out, m, 'thresholds.env'), 'utf8'), m).toMatch(
        new RegExp(`^MODEL=${m.replace('+', '\\+')}\n`),
      );
      expect(readFileSync(join(out, m, 'values.yaml'), 'utf8'), m).toContain(`  model: "${m}"\n`);
    }
    for (const m of ['mobilenet_v2', 'open_nsfw', 'mobilenet_v2+open_nsfw']) {
      expect(readFileSync(join(out, m, 'detection-policy.yaml'), 'utf8'), m).toContain(`  model: ${m}\n`);
    }
    // A refusal is told once, though every model met it; the bar counts every model's files.
    expect(stderr.match(/not decodable: nsfw\/corrupt-header\.jpg: 4005/g)).toHaveLength(1);
    expect(stderr).toMatch(/\] 21\/21 .*ETA/);
  });

  it('puts the models side by side with the figures of their own scores, and recommends by the rules', () => {
    const report = JSON.parse(readFileSync(join(out, 'comparison.json'), 'utf8')) as {
      targets: Targets;
      models: ModelComparison[];
      recommendation: { model: string; thresholds: { allow: number; block: number }; meetsTargets: boolean };
    };
    expect(report.targets).toEqual(TARGETS);
    expect(report.models.map((r) => r.model)).toEqual(MODELS);
    for (const row of report.models) {
      const s = scoresOf(row.model);
      const of = (label: string) =>
        [...s].filter(([k, v]) => k.startsWith(`${label}/`) && v !== undefined).map(([, v]) => v as number);
      expect(row.cpuMsPerImage, row.model).toBeGreaterThan(0);
      // JSON turns an interval's NaN into null; these scores have both classes, so there is none.
      expect(row, row.model).toEqual(
        compareModel(
          {
            model: row.model,
            nsfw: of('nsfw'),
            sfw: of('sfw'),
            failures: 1,
            cpuMsPerImage: row.cpuMsPerImage,
          },
          TARGETS,
        ),
      );
    }
    const expected = recommend(report.models);
    expect(report.recommendation).toMatchObject({
      model: expected.choice.model,
      thresholds: expected.choice.suggestion,
      meetsTargets: expected.meetsTargets,
    });
    const { model, thresholds } = report.recommendation;
    expect(stdout).toContain(
      `recommended: MODEL=${model} THRESHOLD_ALLOW=${thresholds.allow} THRESHOLD_BLOCK=${thresholds.block}`,
    );
    expect(readFileSync(join(out, 'values.yaml'), 'utf8')).toBe(
      `config:\n  model: "${model}"\n  thresholdAllow: ${thresholds.allow}\n  thresholdBlock: ${thresholds.block}\n`,
    );
    expect(readFileSync(join(out, 'thresholds.env'), 'utf8')).toBe(
      `MODEL=${model}\nTHRESHOLD_ALLOW=${thresholds.allow}\nTHRESHOLD_BLOCK=${thresholds.block}\n`,
    );
    // The DetectionPolicy names the recommended model as MODEL spells it, an ensemble too.
    expect(readFileSync(join(out, 'detection-policy.yaml'), 'utf8')).toContain(`  model: ${model}\n`);
    const html = readFileSync(join(out, 'index.html'), 'utf8');
    expect(html).toContain(`<span id="model">${model}</span>`);
    for (const m of MODELS) expect(html).toContain(`<a href="${encodeURIComponent(m)}/index.html">${m}</a>`);
  });

  it('refuses a model it does not offer, naming it', async () => {
    const err = await calibrateCli([
      '--nsfw',
      work,
      '--sfw',
      work,
      '--out',
      out,
      '--models',
      'mobilenet_v2,nope',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect(err).toMatchObject({ code: 2 });
    expect((err as { stderr: string }).stderr).toContain('--models: "nope" is not one of');
  });
});
