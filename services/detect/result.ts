// The detection result of spec 2.2 and the JSON schema it is serialized with.

import { okSchema } from '../../lib/common/envelope.ts';
import type { ProbedImage } from './image/types.ts';
import { type ModelScores, summarize } from './model/classifier.ts';
import type { FramesScored } from './model/tiled-classify.ts';

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
    /** Frames scored (MAX_FRAMES_SCORED; 1 by default: the first, as the spec says). */
    frames_scored: number;
    /** The 0-based index of the frame whose scores answer. */
    decisive_frame: number;
  };
  timing_ms: number;
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
  /** Several frames scored; unset: the first frame alone. */
  frames?: FramesScored | undefined;
}): DetectionResult {
  const { nsfw, sfw } = summarize(args.scores);
  const scores = { nsfw: clamp01(nsfw), sfw: clamp01(sfw) };
  return {
    decision: decisionFor(scores.nsfw, args.thresholds),
    scores,
    thresholds: { allow: args.thresholds.allow, block: args.thresholds.block },
    image: {
      sha256: args.sha256,
      format: args.probed.format,
      width: args.probed.width,
      height: args.probed.height,
      bytes: args.bytes,
      frames: args.probed.frames,
      frames_scored: args.frames?.scored ?? 1,
      decisive_frame: args.frames?.decisive ?? 0,
    },
    timing_ms: Math.round(args.timingMs * 100) / 100,
  };
}

const number01 = { type: 'number', minimum: 0, maximum: 1 } as const;

export const detectionResponseSchema = okSchema({
  type: 'object',
  required: ['decision', 'scores', 'thresholds', 'image', 'timing_ms'],
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
      required: ['sha256', 'format', 'width', 'height', 'bytes', 'frames', 'frames_scored', 'decisive_frame'],
      properties: {
        sha256: { type: 'string' },
        format: { type: 'string' },
        width: { type: 'integer' },
        height: { type: 'integer' },
        bytes: { type: 'integer' },
        frames: { type: 'integer' },
        frames_scored: {
          type: 'integer',
          description: 'Frames scored: 1 (the first) unless the operator set MAX_FRAMES_SCORED higher.',
        },
        decisive_frame: {
          type: 'integer',
          description: 'Index (0-based) of the scored frame whose scores answer: 0 when one frame is scored.',
        },
      },
    },
    timing_ms: { type: 'number' },
  },
});
