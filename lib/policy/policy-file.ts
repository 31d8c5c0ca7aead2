// The policy file the operator renders from a DetectionPolicy into a ConfigMap and the services read
// (POLICY_FILE). One JSON document holding what the policy states: each group (thresholds, model,
// anonymous, tiers.free, tiers.pro, upload.maxBytes, maxFramesScored) is given whole or left out, and what is left out
// stays as the deployment is configured (policy-in-force.ts merges). Parsing validates the file fully,
// so a bad file is refused as a whole and the last good policy stays in force.

import {
  ENSEMBLE_JOIN,
  type ModelChoice,
  modelChoiceProblem,
  OFFERED_MODEL_NAMES,
} from '../common/model-catalogue.ts';
import { SETTINGS } from '../common/settings.ts';
import { type Thresholds, thresholdsProblem, type WindowLimits, windowLimitsProblem } from './rules.ts';

export interface PolicyDocument {
  /** The DetectionPolicy's name and generation (logs, debugging). */
  source: { name: string; generation: number };
  thresholds?: Thresholds;
  /** A model name as MODEL spells it. */
  model?: ModelChoice;
  anonymous?: WindowLimits;
  tiers?: { free?: WindowLimits; pro?: WindowLimits };
  upload?: { maxBytes?: number };
  /** Frames of an animation scored, at most (MAX_FRAMES_SCORED). */
  maxFramesScored?: number;
}

export const POLICY_FILE_KEY = 'policy.json';

function num(v: unknown, what: string, min: number, max = Number.POSITIVE_INFINITY): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw new Error(`${what} must be a number in [${min}, ${max}], got ${JSON.stringify(v)}`);
  }
  return v;
}

function obj(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`${what} must be an object`);
  return v as Record<string, unknown>;
}

/** A group the policy leaves out: absent or null. */
function omitted(v: unknown): v is undefined | null {
  return v === undefined || v === null;
}

function limits(v: unknown, what: string, perMinute: number, perDay: number): WindowLimits {
  const o = obj(v, what);
  const parsed = {
    perMinute: num(o.perMinute, `${what}.perMinute`, perMinute),
    perDay: num(o.perDay, `${what}.perDay`, perDay),
  };
  const problem = windowLimitsProblem(parsed, { perMinute: `${what}.perMinute`, perDay: `${what}.perDay` });
  if (problem) throw new Error(problem);
  return parsed;
}

function thresholds(v: unknown): Thresholds {
  const t = obj(v, 'thresholds');
  const allow = num(t.allow, 'thresholds.allow', SETTINGS.THRESHOLD_ALLOW.min, SETTINGS.THRESHOLD_ALLOW.max);
  const block = num(t.block, 'thresholds.block', SETTINGS.THRESHOLD_BLOCK.min, SETTINGS.THRESHOLD_BLOCK.max);
  const problem = thresholdsProblem(
    { allow, block },
    { allow: 'thresholds.allow', block: 'thresholds.block' },
  );
  if (problem) throw new Error(problem);
  return { allow, block };
}

function model(v: unknown): ModelChoice {
  const problem = typeof v === 'string' ? modelChoiceProblem(v, OFFERED_MODEL_NAMES) : 'it is not a string';
  if (problem) {
    throw new Error(
      `model must be one of ${OFFERED_MODEL_NAMES.join(', ')} or several joined by ${ENSEMBLE_JOIN}, got ${JSON.stringify(v)}: ${problem}`,
    );
  }
  return v as ModelChoice;
}

/** Parses and validates the file's text; throws an Error naming the first bad field. */
export function parsePolicy(text: string): PolicyDocument {
  const o = obj(JSON.parse(text), 'the policy');
  const source = obj(o.source, 'source');
  const doc: PolicyDocument = {
    source: { name: String(source.name ?? ''), generation: Number(source.generation ?? 0) },
  };
  if (!omitted(o.thresholds)) doc.thresholds = thresholds(o.thresholds);
  if (!omitted(o.model)) doc.model = model(o.model);
  if (!omitted(o.anonymous))
    doc.anonymous = limits(o.anonymous, 'anonymous', SETTINGS.ANON_PER_MINUTE.min, SETTINGS.ANON_PER_DAY.min);
  if (!omitted(o.tiers)) {
    const tiers = obj(o.tiers, 'tiers');
    doc.tiers = {};
    if (!omitted(tiers.free))
      doc.tiers.free = limits(
        tiers.free,
        'tiers.free',
        SETTINGS.FREE_PER_MINUTE.min,
        SETTINGS.FREE_PER_DAY.min,
      );
    if (!omitted(tiers.pro))
      doc.tiers.pro = limits(tiers.pro, 'tiers.pro', SETTINGS.PRO_PER_MINUTE.min, SETTINGS.PRO_PER_DAY.min);
  }
  if (!omitted(o.maxFramesScored)) {
    const { min, max } = SETTINGS.MAX_FRAMES_SCORED;
    const frames = num(o.maxFramesScored, 'maxFramesScored', min, max);
    if (!Number.isInteger(frames)) throw new Error(`maxFramesScored must be a whole number, got ${frames}`);
    doc.maxFramesScored = frames;
  }
  if (!omitted(o.upload)) {
    const upload = obj(o.upload, 'upload');
    doc.upload = {};
    if (!omitted(upload.maxBytes))
      doc.upload.maxBytes = num(upload.maxBytes, 'upload.maxBytes', SETTINGS.MAX_FILE_BYTES.min);
  }
  return doc;
}
