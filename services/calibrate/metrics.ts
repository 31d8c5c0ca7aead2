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
  for (const s of nsfw) {
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((sorted[mid] as number) < s) lo = mid + 1;
      else hi = mid;
    }
    let eq = lo;
    while (eq < sorted.length && sorted[eq] === s) eq++;
    sum += lo + (eq - lo) / 2;
  }
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
