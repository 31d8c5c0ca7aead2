// The policy file the operator renders from a DetectionPolicy into a ConfigMap and the services read
// (POLICY_FILE). One JSON document; parsing validates it fully so a bad file is refused as a whole
// and the last good policy stays in force.

import type { ModelName } from './model-catalogue.ts';
import { type Thresholds, thresholdsProblem, type WindowLimits, windowLimitsProblem } from './rules.ts';

export interface PolicyDocument {
  /** The DetectionPolicy's name and generation (logs, debugging). */
  source: { name: string; generation: number };
  thresholds: Thresholds;
  model: 'MobileNetV2' | 'InceptionV3';
  anonymous: WindowLimits;
  tiers: { free: WindowLimits; pro: WindowLimits };
  upload: { maxBytes: number };
}

export const POLICY_FILE_KEY = 'policy.json';

/** The policy's model names (DetectionPolicy spec.model) as the services' MODEL names them. */
export const POLICY_MODELS: Record<PolicyDocument['model'], ModelName> = {
  MobileNetV2: 'mobilenet_v2',
  InceptionV3: 'inception_v3',
};

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

function limits(v: unknown, what: string): WindowLimits {
  const o = obj(v, what);
  const parsed = {
    perMinute: num(o.perMinute, `${what}.perMinute`, 0),
    perDay: num(o.perDay, `${what}.perDay`, 0),
  };
  const problem = windowLimitsProblem(parsed, { perMinute: `${what}.perMinute`, perDay: `${what}.perDay` });
  if (problem) throw new Error(problem);
  return parsed;
}

/** Parses and validates the file's text; throws an Error naming the first bad field. */
export function parsePolicy(text: string): PolicyDocument {
  const o = obj(JSON.parse(text), 'the policy');
  const source = obj(o.source, 'source');
  const t = obj(o.thresholds, 'thresholds');
  const allow = num(t.allow, 'thresholds.allow', 0, 1);
  const block = num(t.block, 'thresholds.block', 0, 1);
  const problem = thresholdsProblem(
    { allow, block },
    { allow: 'thresholds.allow', block: 'thresholds.block' },
  );
  if (problem) throw new Error(problem);
  if (o.model !== 'MobileNetV2' && o.model !== 'InceptionV3') {
    throw new Error(`model must be MobileNetV2 or InceptionV3, got ${JSON.stringify(o.model)}`);
  }
  const tiers = obj(o.tiers, 'tiers');
  return {
    source: { name: String(source.name ?? ''), generation: Number(source.generation ?? 0) },
    thresholds: { allow, block },
    model: o.model,
    anonymous: limits(o.anonymous, 'anonymous'),
    tiers: { free: limits(tiers.free, 'tiers.free'), pro: limits(tiers.pro, 'tiers.pro') },
    upload: { maxBytes: num(obj(o.upload, 'upload').maxBytes, 'upload.maxBytes', 0) },
  };
}
