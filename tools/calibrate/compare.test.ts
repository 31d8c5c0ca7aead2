// The comparison's logic on hand-made scores: what each model's suggestion does on the images, which
// targets it misses, and which model the recommendation picks; then the files written for it.

import { describe, expect, it } from 'vitest';
import { compareModel, type ModelRun, recommend, type Targets } from './compare.ts';
import { comparisonFiles } from './compare-report.ts';
import { policyModelName } from './report.ts';

// Four NSFW, four SFW. "sharp" separates them with a wide gap; "blurry" overlaps them.
const sharpScores = { nsfw: [0.95, 0.9, 0.85, 0.8], sfw: [0.05, 0.1, 0.15, 0.2] };
const blurryScores = { nsfw: [0.9, 0.7, 0.5, 0.3], sfw: [0.6, 0.4, 0.2, 0.1] };
const targets: Targets = { falseBlock: 0, miss: 0, review: 0.25 };
const run = (model: string, scores: { nsfw: number[]; sfw: number[] }, cpuMsPerImage: number): ModelRun => ({
  model,
  ...scores,
  failures: 0,
  cpuMsPerImage,
});

describe('one model on the labelled images', () => {
  it('reads its suggestion back on the images: false blocks, misses, reviews, the targets missed', () => {
    // No SFW blocked: block above 0.2 → 0.21; no NSFW missed: allow at most 0.8, and below block → 0.2.
    // Nothing between 0.2 and 0.21 except the SFW image at 0.2: one of eight reviewed.
    const sharp = compareModel(run('a', sharpScores, 10), targets);
    expect(sharp).toMatchObject({
      suggestion: { allow: 0.2, block: 0.21 },
      falseBlockRate: 0,
      missRate: 0,
      reviewRate: 1 / 8,
      missed: [],
      auc: { auc: 1, low: 1, high: 1 },
    });
    // Block above the SFW 0.6 → 0.61; allow at most 0.3 → 0.3. Reviewed: 0.5, 0.3 (NSFW), 0.6, 0.4 (SFW).
    const blurry = compareModel(run('b', blurryScores, 10), targets);
    expect(blurry).toMatchObject({
      suggestion: { allow: 0.3, block: 0.61 },
      falseBlockRate: 0,
      missRate: 0,
      reviewRate: 4 / 8,
      missed: ['review'],
    });
    // NSFW over SFW: 0.9 and 0.7 beat all 4, 0.5 beats 3, 0.3 beats 2 → 13 of 16.
    expect(blurry.auc.auc).toBe(13 / 16);
    expect(blurry.auc.low).toBeLessThan(13 / 16);
  });
});

describe('the recommendation', () => {
  it('picks the cheaper of two models that both meet the targets', () => {
    const rows = [
      compareModel(run('dear', sharpScores, 40), targets),
      compareModel(run('cheap', { nsfw: [0.99, 0.9, 0.85, 0.8], sfw: sharpScores.sfw }, 12), targets),
    ];
    const r = recommend(rows);
    expect(r.choice.model).toBe('cheap');
    expect(r.meetsTargets).toBe(true);
    expect(r.reason).toBe('2 of 2 models meet every target; cheap costs the least CPU per image');
  });

  it('passes over a cheaper model that misses a target', () => {
    const r = recommend([
      compareModel(run('cheap-blurry', blurryScores, 5), targets),
      compareModel(run('dear-sharp', sharpScores, 50), targets),
    ]);
    expect(r.choice.model).toBe('dear-sharp');
    expect(r.meetsTargets).toBe(true);
  });

  it('says when none meets the targets, and picks the fewest reviews', () => {
    const strict = { ...targets, review: 0 };
    const r = recommend([
      compareModel(run('blurry', blurryScores, 5), strict),
      compareModel(run('sharp', sharpScores, 50), strict),
    ]);
    expect(r.meetsTargets).toBe(false);
    expect(r.choice.model).toBe('sharp');
    expect(r.reason).toBe('no model meets every target; sharp sends the fewest images to review');
  });
});

describe('the files of the recommendation', () => {
  const input = (model: string) => {
    const rows = [compareModel(run(model, sharpScores, 10), targets)];
    return {
      outDir: '/nowhere',
      nsfwDir: 'n',
      sfwDir: 's',
      targets,
      rows,
      recommendation: recommend(rows),
    };
  };

  it('write the model with its thresholds: chart values, environment, DetectionPolicy', () => {
    const files = comparisonFiles(input('mobilenet_v2'));
    expect(files['values.yaml']).toBe(
      'config:\n  model: "mobilenet_v2"\n  thresholdAllow: 0.2\n  thresholdBlock: 0.21\n',
    );
    expect(files['thresholds.env']).toBe('MODEL=mobilenet_v2\nTHRESHOLD_ALLOW=0.2\nTHRESHOLD_BLOCK=0.21\n');
    expect(files['detection-policy.yaml']).toContain(
      'spec:\n  thresholds:\n    allow: 0.2\n    block: 0.21\n  model: mobilenet_v2\n',
    );
    const json = JSON.parse(files['comparison.json'] ?? '') as { recommendation: unknown };
    expect(json.recommendation).toEqual({
      model: 'mobilenet_v2',
      thresholds: { allow: 0.2, block: 0.21 },
      meetsTargets: true,
      reason: '1 of 1 models meet every target; mobilenet_v2 costs the least CPU per image',
    });
    expect(files['index.html']).toContain('<span id="model">mobilenet_v2</span>');
  });

  it('name an ensemble in the DetectionPolicy as MODEL spells it, and no model a policy cannot name', () => {
    expect(policyModelName('inception_v3')).toBe('inception_v3');
    expect(policyModelName('open_nsfw')).toBe('open_nsfw');
    expect(policyModelName('mobilenet_v2_int8')).toBeUndefined();
    const files = comparisonFiles(input('mobilenet_v2+open_nsfw'));
    expect(files['detection-policy.yaml']).toContain('  model: mobilenet_v2+open_nsfw\n');
    expect(files['values.yaml']).toContain('  model: "mobilenet_v2+open_nsfw"\n');
    expect(files['index.html']).not.toContain('No detection-policy.yaml');
  });
});
