// Models side by side on the same labelled images: each model's AUC (with DeLong's interval), its
// suggested thresholds and what they do on these images (false blocks, misses, reviews), its CPU cost
// per image; and the recommendation: the cheapest model whose thresholds meet every target.

import {
  type AucInterval,
  reviewRate,
  rocAucInterval,
  type Suggestion,
  suggestThresholds,
  thresholdRow,
  thresholdTable,
} from './metrics.ts';

export interface ModelRun {
  model: string;
  nsfw: readonly number[];
  sfw: readonly number[];
  /** Files the service refused (the same for every model: refusals come before the model). */
  failures: number;
  /** Process CPU time (user + system, every thread) per scored image, decode included. */
  cpuMsPerImage: number;
}

export interface Targets {
  /** Largest share of SFW images blocked (score >= block). */
  falseBlock: number;
  /** Largest share of NSFW images allowed (score < allow). */
  miss: number;
  /** Largest share of all images sent to review (allow <= score < block). */
  review: number;
}

export interface ModelComparison {
  model: string;
  nsfwScored: number;
  sfwScored: number;
  failures: number;
  auc: AucInterval;
  suggestion: Suggestion;
  falseBlockRate: number;
  missRate: number;
  reviewRate: number;
  cpuMsPerImage: number;
  /** The targets the suggestion misses on these images (none: it meets them all). */
  missed: ('false-block' | 'miss' | 'review')[];
}

export function compareModel(run: ModelRun, targets: Targets): ModelComparison {
  const suggestion = suggestThresholds(thresholdTable(run.nsfw, run.sfw), targets.falseBlock, targets.miss);
  const falseBlockRate = thresholdRow(suggestion.block, run.nsfw, run.sfw).falseBlockRate;
  const missRate = thresholdRow(suggestion.allow, run.nsfw, run.sfw).missRate;
  const review = reviewRate(run.nsfw, run.sfw, suggestion);
  const missed: ModelComparison['missed'] = [];
  if (falseBlockRate > targets.falseBlock) missed.push('false-block');
  if (missRate > targets.miss) missed.push('miss');
  if (review > targets.review) missed.push('review');
  return {
    model: run.model,
    nsfwScored: run.nsfw.length,
    sfwScored: run.sfw.length,
    failures: run.failures,
    auc: rocAucInterval(run.nsfw, run.sfw),
    suggestion,
    falseBlockRate,
    missRate,
    reviewRate: review,
    cpuMsPerImage: run.cpuMsPerImage,
    missed,
  };
}

export interface Recommendation {
  choice: ModelComparison;
  meetsTargets: boolean;
  reason: string;
}

/**
 * The cheapest model (CPU per image) whose suggested thresholds meet every target, ties to the higher
 * AUC. When none does, the one that sends the fewest images to review (every suggestion keeps false
 * blocks and misses within their targets by widening the review band), ties to the cheaper.
 */
export function recommend(rows: readonly ModelComparison[]): Recommendation {
  if (!rows.length) throw new Error('no model to recommend');
  const meeting = rows.filter((r) => r.missed.length === 0);
  if (meeting.length) {
    const choice = [...meeting].sort((a, b) => a.cpuMsPerImage - b.cpuMsPerImage || b.auc.auc - a.auc.auc)[0];
    if (!choice) throw new Error('unreachable');
    return {
      choice,
      meetsTargets: true,
      reason: `${meeting.length} of ${rows.length} models meet every target; ${choice.model} costs the least CPU per image`,
    };
  }
  const choice = [...rows].sort(
    (a, b) => a.reviewRate - b.reviewRate || a.cpuMsPerImage - b.cpuMsPerImage,
  )[0];
  if (!choice) throw new Error('unreachable');
  return {
    choice,
    meetsTargets: false,
    reason: `no model meets every target; ${choice.model} sends the fewest images to review`,
  };
}
