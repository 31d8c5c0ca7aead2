import { describe, expect, it } from 'vitest';
import {
  histogram,
  reviewRate,
  rocAuc,
  rocAucInterval,
  suggestThresholds,
  thresholdRow,
  thresholdTable,
} from './metrics.ts';

describe('calibration metrics', () => {
  const nsfw = [0.95, 0.8, 0.6, 0.3];
  const sfw = [0.01, 0.05, 0.2, 0.7];

  it('reads a threshold both ways: SFW at or above it blocked, NSFW below it missed', () => {
    expect(thresholdRow(0.7, nsfw, sfw)).toEqual({
      threshold: 0.7,
      sfwBlocked: 1,
      nsfwMissed: 2,
      falseBlockRate: 0.25,
      missRate: 0.5,
      precision: 2 / 3,
      recall: 0.5,
    });
    // Nothing blocked: precision is 1 by convention, recall 0.
    expect(thresholdRow(1, nsfw, sfw)).toMatchObject({
      sfwBlocked: 0,
      nsfwMissed: 4,
      precision: 1,
      recall: 0,
    });
  });

  it('suggests the lowest block within the false-block target and the highest allow under it within the miss target', () => {
    const table = thresholdTable(nsfw, sfw);
    expect(table).toHaveLength(101);
    // False-block <= 0: block must pass 0.7 → 0.71. Miss <= 0.25: allow at most 0.6 (0.3 is then missed).
    expect(suggestThresholds(table, 0, 0.25)).toEqual({ block: 0.71, allow: 0.6 });
    // Miss <= 0: allow at most 0.3.
    expect(suggestThresholds(table, 0, 0)).toEqual({ block: 0.71, allow: 0.3 });
    // Allow stays below block (a DetectionPolicy refuses allow >= block).
    expect(suggestThresholds(table, 0.5, 1)).toEqual({ block: 0.06, allow: 0.05 });
    // Three SFW at 0.01, 0.05, 0.2: a false-block target of 0.34 lets one (1/3) be blocked, so block
    // must pass 0.05 → 0.06; a miss target of 0.25 lets one of four NSFW through, which no allow under
    // 0.06 reaches: allow is the highest candidate below block.
    expect(suggestThresholds(thresholdTable(nsfw, [0.01, 0.05, 0.2]), 0.34, 0.25)).toEqual({
      block: 0.06,
      allow: 0.05,
    });
    // Every candidate from 0 to 1, the last one blocking nothing.
    expect(table.map((row) => row.threshold)).toEqual(Array.from({ length: 101 }, (_, k) => k / 100));
    expect(table[0]).toMatchObject({ sfwBlocked: 4, nsfwMissed: 0, falseBlockRate: 1, missRate: 0 });
    expect(table[100]).toMatchObject({ sfwBlocked: 0, nsfwMissed: 4, falseBlockRate: 0, missRate: 1 });
  });

  it('computes the ROC AUC with ties as halves, and histograms with 1.0 in the last bin', () => {
    expect(rocAuc([0.9, 0.8], [0.1, 0.2])).toBe(1);
    expect(rocAuc([0.5], [0.5])).toBe(0.5);
    expect(rocAuc(nsfw, sfw)).toBe(14 / 16);
    expect(histogram([0, 0.49, 0.5, 1], 2)).toEqual([2, 2]);
  });

  it("gives the AUC DeLong's interval, computed by hand", () => {
    // NSFW components (share of SFW each outscores): 1, 1, 3/4, 3/4 → variance (n-1) 1/48.
    // SFW components (share of NSFW outscoring each): 1, 1, 1, 1/2 → variance 1/16.
    // var(AUC) = (1/48)/4 + (1/16)/4 = 1/48.
    const r = rocAucInterval(nsfw, sfw);
    expect(r.auc).toBe(14 / 16);
    expect(r.se).toBeCloseTo(Math.sqrt(1 / 48), 12);
    expect(r.low).toBeCloseTo(14 / 16 - 1.96 * Math.sqrt(1 / 48), 12);
    expect(r.high).toBe(1); // 0.875 + 0.283, clipped
    // Ties count as halves in the components too: one NSFW and one SFW at 0.5, AUC ½, no spread.
    expect(rocAucInterval([0.5], [0.5])).toEqual({ auc: 0.5, se: 0, low: 0.5, high: 0.5 });
    // A perfect ordering: AUC 1, and no component varies (the interval's known blind spot).
    expect(rocAucInterval([0.9, 0.8, 0.7], [0.1, 0.2])).toEqual({ auc: 1, se: 0, low: 1, high: 1 });
    // The reverse ordering: 0.
    expect(rocAucInterval([0.1, 0.2], [0.9, 0.8, 0.7]).auc).toBe(0);
    expect(Number.isNaN(rocAucInterval([], [0.1]).auc)).toBe(true);
  });

  it('counts as review the images from allow up to, not including, block', () => {
    // allow 0.2, block 0.8: NSFW 0.6 and 0.3, SFW 0.2 and 0.7 are reviewed; 0.8 is blocked.
    expect(reviewRate(nsfw, sfw, { allow: 0.2, block: 0.8 })).toBe(4 / 8);
    expect(reviewRate(nsfw, sfw, { allow: 0, block: 1 })).toBe(1);
  });
});
