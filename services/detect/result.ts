// The detection result of spec 2.2 and the JSON schema it is serialized with.

import { okSchema } from '../../lib/common/envelope.ts';
import {
  MODEL_FAMILIES,
  MODELS,
  type ModelChoice,
  type ModelFamily,
  OFFERED_MODEL_NAMES,
} from '../../lib/common/model-catalogue.ts';
import type { HashListMatch } from './hash-lists.ts';
import type { ImagePdq } from './image/pdq.ts';
import { IMAGE_FORMATS, type ProbedImage } from './image/types.ts';
import { classesOf, type ModelScores, type ResultClasses, summarize } from './model/classifier.ts';
import { FAMILY_DRIVERS } from './model/family-drivers.ts';
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
    /** Meta's PDQ of the decoded first frame (absent when PDQ_HASHES is off). */
    pdq?: string;
    pdq_quality?: number;
  };
  /** Known-bad hash lists the image matched (hash-lists.ts): the closest entry of each. */
  matches: HashListMatch[];
  timing_ms: number;
  /** The model or ensemble that scored (MODEL or the policy's model). */
  model: ModelChoice;
  /** The model family's own class scores; an ensemble's per member. */
  classes: ResultClasses;
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
  model: ModelChoice;
  scores: ModelScores;
  thresholds: Thresholds;
  probed: ProbedImage;
  sha256: string;
  bytes: number;
  timingMs: number;
  /** Several frames scored; unset: the first frame alone. */
  frames?: FramesScored | undefined;
  /** The decoded frame's PDQ (PDQ_HASHES on); absent: no hash in the answer. */
  pdq?: ImagePdq | undefined;
  matches?: HashListMatch[];
}): DetectionResult {
  const matches = args.matches ?? [];
  const { nsfw, sfw } = summarize(args.scores, args.model);
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
      frames_scored: args.frames?.scored ?? 1,
      decisive_frame: args.frames?.decisive ?? 0,
      ...(args.pdq && { pdq: args.pdq.hash, pdq_quality: args.pdq.quality }),
    },
    matches,
    timing_ms: Math.round(args.timingMs * 100) / 100,
    model: args.model,
    classes: classesOf(args.scores, args.model),
  };
}

const number01 = { type: 'number', minimum: 0, maximum: 1 } as const;

const classScore = (meaning: string) => ({ ...number01, description: meaning });
/** The offered models of each family, for the descriptions. */
const modelsOf = (family: ModelFamily): string =>
  OFFERED_MODEL_NAMES.filter((m) => MODELS[m].family === family).join(', ');
/** One model's own classes, by name: every family's (its driver says what each means). */
const familyClasses = Object.fromEntries(
  MODEL_FAMILIES.flatMap((family) =>
    Object.entries(FAMILY_DRIVERS[family].describe.classes as Record<string, string>).map(
      ([name, meaning]) => [name, classScore(`${family} family (${modelsOf(family)}): ${meaning}`)],
    ),
  ),
);
/** Each family's classes and how its scores.nsfw is made, for data.classes's description. */
const familiesDescribed = MODEL_FAMILIES.map((family) => {
  const { classes, nsfw } = FAMILY_DRIVERS[family].describe;
  const names = Object.keys(classes).map((c) => `\`${c}\``);
  return `${family} family (${modelsOf(family)}): ${names.join(', ')} (scores.nsfw is ${nsfw}).`;
}).join(' ');

const modelSchema = {
  type: 'string',
  description:
    'The model that scored, or the ensemble (members joined by `+`, e.g. `mobilenet_v2+open_nsfw`). Scores and thresholds do not carry over between models.',
  examples: ['mobilenet_v2'],
} as const;

const classesSchema = {
  type: 'object',
  description: `The model family's own class scores, read by name. ${familiesDescribed} An ensemble: one object per member, keyed by the member's name, each with that member's classes.`,
  properties: familyClasses,
  additionalProperties: {
    type: 'object',
    description: "An ensemble member's classes (the member's name is the key).",
    properties: familyClasses,
  },
} as const;

export const detectionResponseSchema = okSchema({
  type: 'object',
  required: ['decision', 'scores', 'thresholds', 'image', 'matches', 'timing_ms', 'model', 'classes'],
  properties: {
    decision: {
      type: 'string',
      enum: ['allow', 'review', 'block'],
      description:
        'The suggestion: `allow` when scores.nsfw < thresholds.allow, `block` when scores.nsfw >= thresholds.block, `review` in between. The caller owns the policy.',
    },
    scores: {
      type: 'object',
      description: 'Read by name, never by position.',
      required: ['nsfw', 'sfw'],
      properties: {
        nsfw: { ...number01, description: 'Probability that the image is NSFW (pornographic or exposing).' },
        sfw: { ...number01, description: 'Probability that it is safe; nsfw + sfw is about 1.' },
      },
    },
    thresholds: {
      type: 'object',
      description:
        'The thresholds this answer was decided with. They may be recalibrated: store them with any score you keep.',
      required: ['allow', 'block'],
      properties: {
        allow: { type: 'number', description: 'Below it: `allow`.' },
        block: { type: 'number', description: 'At or above it: `block`.' },
      },
    },
    image: {
      type: 'object',
      description: 'What was read from the bytes.',
      required: ['sha256', 'format', 'width', 'height', 'bytes', 'frames', 'frames_scored', 'decisive_frame'],
      properties: {
        sha256: {
          type: 'string',
          description:
            'SHA-256 of the submitted bytes, hex: a cache key of your own (the service caches nothing).',
        },
        format: {
          type: 'string',
          enum: [...IMAGE_FORMATS],
          description: 'The format detected from the content, never from the file name or Content-Type.',
        },
        width: {
          type: 'integer',
          description: 'Pixels, of the first frame as stored (before EXIF rotation).',
        },
        height: {
          type: 'integer',
          description: 'Pixels, of the first frame as stored (before EXIF rotation).',
        },
        bytes: { type: 'integer', description: 'Size of the submitted image in bytes.' },
        frames: {
          type: 'integer',
          description:
            'Frames or pages of the input; more than 1 is an animation. Only the first is scored unless the operator set MAX_FRAMES_SCORED higher (frames_scored).',
        },
        pdq: {
          type: 'string',
          pattern: '^[0-9a-f]{64}$',
          description:
            "Meta's PDQ perceptual hash of the decoded first frame (before trims and tiles; a side of 1024 pixels or more averaged over blocks first, docs/hash-matching.md), 64 lowercase hex digits as ThreatExchange writes it; all zeros for an image under 5 pixels on a side. Absent when the operator turned PDQ_HASHES off.",
        },
        pdq_quality: {
          type: 'integer',
          minimum: 0,
          maximum: 100,
          description:
            'PDQ quality; below 50 (PDQ_MIN_QUALITY) the hash is not matched against the lists. Present with `pdq`.',
        },
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
    matches: {
      type: 'array',
      description:
        "Known-bad hash lists the image matched, the closest entry of each (rotations and mirrors included); empty when none (always, when the operator turned PDQ_HASHES off). A match raises `decision` to the list's action; the scores stay the model's.",
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
    timing_ms: {
      type: 'number',
      description:
        "The server's wall time for this image, from format sniffing to the end of inference (upload excluded), in milliseconds.",
    },
    model: modelSchema,
    classes: classesSchema,
  },
});
