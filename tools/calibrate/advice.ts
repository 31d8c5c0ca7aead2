// Whether a calibration's suggested operating point is advice worth deploying: enough images of each
// label for the rates to mean anything, and a point that neither allows nothing, nor blocks everything,
// nor sends more than a stated share of the images to review. A point that fails is flagged in the
// report, and its deployable files (values.yaml, thresholds.env, detection-policy.yaml) are written
// only with --force. The rates at the point carry their 95 % Wilson intervals.

import type { Suggestion } from './metrics.ts';

export interface AdviceLimits {
  /** Images of each label (scored) below which no thresholds are suggested. */
  minPerLabel: number;
  /** The largest share of all images the point may send to review. */
  maxReview: number;
}

export const DEFAULT_ADVICE: AdviceLimits = { minPerLabel: 30, maxReview: 0.5 };

export type ProblemKind = 'too-few-images' | 'allows-nothing' | 'blocks-everything' | 'too-much-review';

export interface Problem {
  kind: ProblemKind;
  message: string;
}

export interface Rate {
  count: number;
  of: number;
  rate: number;
  /** Wilson score interval, 95 %. */
  low: number;
  high: number;
}

/** What the point does to the labelled images, each share with its interval. */
export interface OperatingPoint {
  falseBlock: Rate;
  miss: Rate;
  allowed: Rate;
  blocked: Rate;
  review: Rate;
}

/** The 95 % Wilson score interval of k successes in n trials (sound at 0 and n, unlike k/n ± …). */
export function wilson(k: number, n: number): Rate {
  if (n === 0) return { count: k, of: n, rate: Number.NaN, low: Number.NaN, high: Number.NaN };
  const z = 1.96;
  const p = k / n;
  const denominator = 1 + (z * z) / n;
  const centre = (p + (z * z) / (2 * n)) / denominator;
  const half = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / denominator;
  return { count: k, of: n, rate: p, low: Math.max(0, centre - half), high: Math.min(1, centre + half) };
}

export function operatingPoint(
  nsfw: readonly number[],
  sfw: readonly number[],
  s: Suggestion,
): OperatingPoint {
  const all = [...nsfw, ...sfw];
  const n = (xs: readonly number[], f: (x: number) => boolean) => xs.filter(f).length;
  return {
    falseBlock: wilson(
      n(sfw, (x) => x >= s.block),
      sfw.length,
    ),
    miss: wilson(
      n(nsfw, (x) => x < s.allow),
      nsfw.length,
    ),
    allowed: wilson(
      n(all, (x) => x < s.allow),
      all.length,
    ),
    blocked: wilson(
      n(all, (x) => x >= s.block),
      all.length,
    ),
    review: wilson(
      n(all, (x) => x >= s.allow && x < s.block),
      all.length,
    ),
  };
}

const pct = (r: number) => `${(r * 100).toFixed(1)} %`;

/** Why the point is not advice to deploy; empty when it is. */
export function adviceProblems(
  nsfw: readonly number[],
  sfw: readonly number[],
  s: Suggestion,
  limits: AdviceLimits = DEFAULT_ADVICE,
): Problem[] {
  const problems: Problem[] = [];
  const few = (['nsfw', 'sfw'] as const).filter(
    (l) => (l === 'nsfw' ? nsfw : sfw).length < limits.minPerLabel,
  );
  if (few.length) {
    problems.push({
      kind: 'too-few-images',
      message: `too few images to suggest thresholds: ${nsfw.length} NSFW and ${sfw.length} SFW scored, at least ${limits.minPerLabel} of each are needed (--min-images)`,
    });
  }
  const point = operatingPoint(nsfw, sfw, s);
  if (point.allowed.count === 0) {
    problems.push({
      kind: 'allows-nothing',
      message: `allow=${s.allow} allows no image: every image would go to review or be blocked`,
    });
  }
  if (point.blocked.count === point.blocked.of && point.blocked.of > 0) {
    problems.push({
      kind: 'blocks-everything',
      message: `block=${s.block} blocks every image`,
    });
  }
  if (point.review.rate > limits.maxReview) {
    problems.push({
      kind: 'too-much-review',
      message: `allow=${s.allow} block=${s.block} sends ${pct(point.review.rate)} of the images to review, more than ${pct(limits.maxReview)} (--max-review)`,
    });
  }
  return problems;
}
