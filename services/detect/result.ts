// The detection result of spec 2.2 and the JSON schema it is serialized with.

import { okSchema } from '../../lib/common/envelope.ts';
import type { HashListMatch } from './hash-lists.ts';
import type { ImagePdq } from './image/pdq.ts';
import type { ProbedImage } from './image/types.ts';
import { type ModelScores, summarize } from './model/classifier.ts';

export type Decision = 'allow' | 'review' | 'block';

export interface Thresholds {
  allow: number;
  block: number;
}

export interface DetectionResult {
  decision: Decision;
  scores: { nsfw: number; sfw: number };
  thresholds: Thresholds;
  image: {
    sha256: string;
    format: string;
    width: number;
    height: number;
    bytes: number;
    frames: number;
    pdq: string;
    pdq_quality: number;
  };
  /** Known-bad hash lists the image matched (hash-lists.ts): the closest entry of each. */
  matches: HashListMatch[];
  timing_ms: number;
}

const RANK: Record<Decision, number> = { allow: 0, review: 1, block: 2 };

/**
 * A match raises the decision to its list's action, whatever the score: a known image is known. The
 * scores stay the model's.
 */
export function withMatches(decision: Decision, matches: readonly HashListMatch[]): Decision {
  return matches.reduce<Decision>((d, m) => (RANK[m.action] > RANK[d] ? m.action : d), decision);
}

/** Spec 2.2 rule 2: allow below `allow`, block at or above `block`, review in between. */
export function decisionFor(nsfw: number, t: Thresholds): Decision {
  if (nsfw < t.allow) return 'allow';
  if (nsfw >= t.block) return 'block';
  return 'review';
}

const clamp01 = (x: number) => Math.min(1, Math.max(0, x));

export function buildResult(args: {
  scores: ModelScores;
  thresholds: Thresholds;
  probed: ProbedImage;
  sha256: string;
  bytes: number;
  timingMs: number;
  /** The decoded frame's PDQ (absent: the all-zero hash of quality 0, as PDQ gives for a tiny image). */
  pdq?: ImagePdq;
  matches?: HashListMatch[];
}): DetectionResult {
  const matches = args.matches ?? [];
  const { nsfw, sfw } = summarize(args.scores);
  const scores = { nsfw: clamp01(nsfw), sfw: clamp01(sfw) };
  return {
    decision: withMatches(decisionFor(scores.nsfw, args.thresholds), matches),
    scores,
    thresholds: { allow: args.thresholds.allow, block: args.thresholds.block },
    image: {
      sha256: args.sha256,
      format: args.probed.format,
      width: args.probed.width,
      height: args.probed.height,
      bytes: args.bytes,
      frames: args.probed.frames,
      pdq: args.pdq?.hash ?? '0'.repeat(64),
      pdq_quality: args.pdq?.quality ?? 0,
    },
    matches,
    timing_ms: Math.round(args.timingMs * 100) / 100,
  };
}

const number01 = { type: 'number', minimum: 0, maximum: 1 } as const;

export const detectionResponseSchema = okSchema({
  type: 'object',
  required: ['decision', 'scores', 'thresholds', 'image', 'matches', 'timing_ms'],
  properties: {
    decision: { type: 'string', enum: ['allow', 'review', 'block'] },
    scores: { type: 'object', required: ['nsfw', 'sfw'], properties: { nsfw: number01, sfw: number01 } },
    thresholds: {
      type: 'object',
      required: ['allow', 'block'],
      properties: { allow: { type: 'number' }, block: { type: 'number' } },
    },
    image: {
      type: 'object',
      required: ['sha256', 'format', 'width', 'height', 'bytes', 'frames', 'pdq', 'pdq_quality'],
      properties: {
        sha256: { type: 'string' },
        format: { type: 'string' },
        width: { type: 'integer' },
        height: { type: 'integer' },
        bytes: { type: 'integer' },
        frames: { type: 'integer' },
        pdq: {
          type: 'string',
          pattern: '^[0-9a-f]{64}$',
          description:
            "Meta's PDQ perceptual hash of the decoded first frame (before trims and tiles), 64 lowercase hex digits as ThreatExchange writes it; all zeros for an image under 5 pixels on a side.",
        },
        pdq_quality: {
          type: 'integer',
          minimum: 0,
          maximum: 100,
          description: 'PDQ quality; below 50 (PDQ_MIN_QUALITY) the hash is not matched against the lists.',
        },
      },
    },
    matches: {
      type: 'array',
      description:
        "Known-bad hash lists the image matched, the closest entry of each (rotations and mirrors included); empty when none. A match raises `decision` to the list's action; the scores stay the model's.",
      items: {
        type: 'object',
        required: ['list', 'distance', 'action'],
        properties: {
          list: { type: 'string' },
          distance: { type: 'integer', minimum: 0, maximum: 256 },
          action: { type: 'string', enum: ['block', 'review'] },
        },
      },
    },
    timing_ms: { type: 'number' },
  },
});
