// GET /internal/policy on detect and quota: which DetectionPolicy generation the process applies now
// (the `source` of the mounted file it has read, or null while the configuration applies), and what is
// in force with it: what the policy states, the configuration for the rest. The operator
// reads it from every ready pod of their Services and reports a policy Ready only once all of them
// apply its current generation: a ConfigMap change reaches a pod's mounted file only at the kubelet's
// next sync of that pod, up to its sync period later.

import type { FastifyInstance } from 'fastify';
import { ok } from '../common/envelope.ts';
import type { PolicyDocument } from './policy-file.ts';
import type { Thresholds, WindowLimits } from './rules.ts';

export const POLICY_REPORT_PATH = '/internal/policy';

export type PolicySource = PolicyDocument['source'];

/** What a process applies to its next request. */
export interface InForce {
  thresholds: Thresholds;
  limits: { anonymous: WindowLimits; tiers: { free: WindowLimits; pro: WindowLimits } };
  maxFileBytes: number;
}

/** The body's `data`. */
export interface PolicyReport {
  source: PolicySource | null;
  inForce?: InForce;
}

/** Registers GET /internal/policy answering with what `source()` (and `inForce()`) read now. */
export function registerPolicyReport(
  app: FastifyInstance,
  source: () => PolicySource | undefined,
  inForce?: () => InForce,
): void {
  app.get(POLICY_REPORT_PATH, async () =>
    ok<PolicyReport>({ source: source() ?? null, ...(inForce && { inForce: inForce() }) }),
  );
}
