// The rules that keep a calibration from handing out bad advice, on made-up scores: too few images,
// a point that allows nothing (the allow=0, block=0.13), one that blocks everything, one that
// sends too much to review; and the Wilson intervals, against figures computed by hand.

import { describe, expect, it } from 'vitest';
import { adviceProblems, operatingPoint, wilson } from './advice.ts';

const spread = (n: number, from: number, to: number) =>
  Array.from({ length: n }, (_, i) => from + ((to - from) * i) / Math.max(1, n - 1));

describe('calibration advice', () => {
  it('gives Wilson 95 % intervals that stay inside [0, 1]', () => {
    // By hand: z = 1.96, p = 0.5, n = 10: centre 0.5, half-width 0.2634.
    expect(wilson(5, 10).low).toBeCloseTo(0.2366, 4);
    expect(wilson(5, 10).high).toBeCloseTo(0.7634, 4);
    // k = 0: low 0, high z²/(n + z²) = 3.8416 / 13.8416.
    expect(wilson(0, 10)).toMatchObject({ rate: 0, low: 0 });
    expect(wilson(0, 10).high).toBeCloseTo(0.2775, 4);
    expect(Number.isNaN(wilson(0, 0).rate)).toBe(true);
  });

  it('is not advice on fewer images of a label than the minimum', () => {
    const nsfw = spread(40, 0.6, 1);
    const sfw = spread(12, 0, 0.3);
    const problems = adviceProblems(
      nsfw,
      sfw,
      { allow: 0.31, block: 0.6 },
      { minPerLabel: 30, maxReview: 0.5 },
    );
    expect(problems.map((p) => p.kind)).toEqual(['too-few-images']);
    expect(problems[0]?.message).toBe(
      'too few images to suggest thresholds: 40 NSFW and 12 SFW scored, at least 30 of each are needed (--min-images)',
    );
  });

  it('flags a point that allows nothing and sends most images to review (allow=0, block=0.13)', () => {
    // Poorly separated: both labels spread over the same range.
    const nsfw = spread(40, 0.05, 0.2);
    const sfw = spread(40, 0.02, 0.16);
    const s = { allow: 0, block: 0.13 };
    const point = operatingPoint(nsfw, sfw, s);
    expect(point.allowed.count).toBe(0);
    const kinds = adviceProblems(nsfw, sfw, s, { minPerLabel: 30, maxReview: 0.5 }).map((p) => p.kind);
    expect(kinds).toEqual(['allows-nothing', 'too-much-review']);
  });

  it('flags a point that blocks every image', () => {
    const nsfw = spread(30, 0.5, 1);
    const sfw = spread(30, 0.4, 0.9);
    expect(adviceProblems(nsfw, sfw, { allow: 0, block: 0 }).map((p) => p.kind)).toEqual([
      'allows-nothing',
      'blocks-everything',
    ]);
  });

  it('passes a point the data supports', () => {
    const nsfw = spread(30, 0.7, 1);
    const sfw = spread(30, 0, 0.2);
    expect(adviceProblems(nsfw, sfw, { allow: 0.21, block: 0.7 })).toEqual([]);
  });
});
