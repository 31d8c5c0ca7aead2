// The numbers of a calibration: for each candidate threshold t (a hundredth), the detect rule of spec
// 2.2 read both ways — a SFW image is falsely blocked when its score is >= t (t as `block`), a NSFW
// image is missed when its score is < t (t as `allow`). Scores are kept as numbers only (8 bytes an
// image), never the images.

export interface ThresholdRow {
  threshold: number;
  /** SFW images with score >= threshold. */
  sfwBlocked: number;
  /** NSFW images with score < threshold. */
  nsfwMissed: number;
  falseBlockRate: number;
  missRate: number;
  /** Of the images blocked at this threshold, the share that is NSFW (1 when none is blocked). */
  precision: number;
  /** Of the NSFW images, the share blocked at this threshold. */
  recall: number;
}

/** The candidate thresholds: 0.00, 0.01, …, 1.00, as k/100 so tests can recompute them exactly. */
export const CANDIDATES: readonly number[] = Array.from({ length: 101 }, (_, k) => k / 100);

export function thresholdRow(t: number, nsfw: readonly number[], sfw: readonly number[]): ThresholdRow {
  let sfwBlocked = 0;
  for (const s of sfw) if (s >= t) sfwBlocked++;
  let nsfwMissed = 0;
  for (const s of nsfw) if (s < t) nsfwMissed++;
  const nsfwBlocked = nsfw.length - nsfwMissed;
  const blocked = nsfwBlocked + sfwBlocked;
  return {
    threshold: t,
    sfwBlocked,
    nsfwMissed,
    falseBlockRate: sfw.length ? sfwBlocked / sfw.length : 0,
    missRate: nsfw.length ? nsfwMissed / nsfw.length : 0,
    precision: blocked ? nsfwBlocked / blocked : 1,
    recall: nsfw.length ? nsfwBlocked / nsfw.length : 0,
  };
}

export function thresholdTable(nsfw: readonly number[], sfw: readonly number[]): ThresholdRow[] {
  return CANDIDATES.map((t) => thresholdRow(t, nsfw, sfw));
}

export interface Suggestion {
  /** Smallest candidate whose false-block rate is within the target (1 when none is). */
  block: number;
  /** Largest candidate below `block` (the policy needs allow < block) whose miss rate is within the target (0 when none is). */
  allow: number;
}

export function suggestThresholds(
  table: readonly ThresholdRow[],
  targetFalseBlock: number,
  targetMiss: number,
): Suggestion {
  const block = table.find((r) => r.falseBlockRate <= targetFalseBlock)?.threshold ?? 1;
  let allow = 0;
  for (const r of table) if (r.threshold < block && r.missRate <= targetMiss) allow = r.threshold;
  return { block, allow };
}

/** Area under the ROC curve: the chance a random NSFW image scores above a random SFW one (ties ½). */
export function rocAuc(nsfw: readonly number[], sfw: readonly number[]): number {
  if (!nsfw.length || !sfw.length) return Number.NaN;
  const sorted = [...sfw].sort((a, b) => a - b);
  let sum = 0;
  for (const s of nsfw) sum += countBelow(sorted, s);
  return sum / (nsfw.length * sfw.length);
}

/** Counts of scores in `bins` equal bins over [0, 1]; a score of 1 falls in the last. */
export function histogram(scores: readonly number[], bins: number): number[] {
  const counts = new Array<number>(bins).fill(0);
  for (const s of scores) {
    const i = Math.min(bins - 1, Math.floor(s * bins));
    counts[i] = (counts[i] ?? 0) + 1;
  }
  return counts;
}

export interface AucInterval {
  auc: number;
  /** DeLong's standard error of the AUC. */
  se: number;
  /** The 95 % confidence interval, AUC ± 1.96 se, clipped to [0, 1]. */
  low: number;
  high: number;
}

/** Share of `sorted` below `x`, ties counted as halves. */
function shareBelow(sorted: readonly number[], x: number): number {
  return countBelow(sorted, x) / sorted.length;
}

/** How many of `sorted` are below `x`, ties counted as halves (binary search). */
function countBelow(sorted: readonly number[], x: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  let eq = lo;
  while (eq < sorted.length && sorted[eq] === x) eq++;
  return lo + (eq - lo) / 2;
}

function sampleVariance(xs: readonly number[]): number {
  if (xs.length < 2) return 0;
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (xs.length - 1);
}

/**
 * The ROC AUC with DeLong's variance (DeLong, DeLong & Clarke-Pearson 1988): each NSFW image's share of
 * SFW images it outscores, and each SFW image's share of NSFW images that outscore it, are the
 * structural components; var = var(NSFW's)/m + var(SFW's)/n. Exact and deterministic (no resampling).
 * With few images, or an AUC of 1 (no component varies), the interval is narrower than the truth.
 */
export function rocAucInterval(nsfw: readonly number[], sfw: readonly number[]): AucInterval {
  if (!nsfw.length || !sfw.length)
    return { auc: Number.NaN, se: Number.NaN, low: Number.NaN, high: Number.NaN };
  const sortedSfw = [...sfw].sort((a, b) => a - b);
  const sortedNsfw = [...nsfw].sort((a, b) => a - b);
  const v10 = nsfw.map((x) => shareBelow(sortedSfw, x));
  const v01 = sfw.map((y) => 1 - shareBelow(sortedNsfw, y));
  const auc = v10.reduce((a, b) => a + b, 0) / v10.length;
  const se = Math.sqrt(sampleVariance(v10) / nsfw.length + sampleVariance(v01) / sfw.length);
  return { auc, se, low: Math.max(0, auc - 1.96 * se), high: Math.min(1, auc + 1.96 * se) };
}

/** Share of all images a policy sends to review: allow <= score < block. */
export function reviewRate(nsfw: readonly number[], sfw: readonly number[], s: Suggestion): number {
  const total = nsfw.length + sfw.length;
  if (!total) return 0;
  let review = 0;
  for (const x of [...nsfw, ...sfw]) if (x >= s.allow && x < s.block) review++;
  return review / total;
}
