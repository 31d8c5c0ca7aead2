// What is in force now: what the mounted policy file (POLICY_FILE, the operator's ConfigMap) states once
// it holds a valid policy, and the configuration for everything else (and for all while there is none). Every composition (detect, quota, all-in-one) gets its
// thresholds, limits and upload limit from these providers, and every caller reads a provider once per
// request: a policy swap applies to the next request and never changes one in flight.

import type { FastifyInstance } from 'fastify';
import type { AccountTier } from '../common/account-tier.ts';
import type { ModelChoice } from '../common/model-catalogue.ts';
import type { PolicyConfig } from './policy-config.ts';
import type { PolicyDocument } from './policy-file.ts';
import { type PolicySource, registerPolicyReport } from './policy-report.ts';
import { type PolicyLogger, PolicyWatch } from './policy-watch.ts';
import type { Thresholds, WindowLimits } from './rules.ts';

/** The quota limits a decision uses: anonymous callers (per IP) and accounts by tier. */
export interface QuotaLimits {
  anonymous: WindowLimits;
  tiers: Record<AccountTier, WindowLimits>;
}

export interface PolicyInForce {
  thresholds(): Thresholds;
  limits(): QuotaLimits;
  /**
   * The largest accepted upload: the policy's `upload.maxBytes`, capped by MAX_FILE_BYTES (the spec's
   * 50 MiB by default). The policy can only lower the limit: the HTTP layer's guards (Expect:
   * 100-continue, the linger after a refusal) are sized from MAX_FILE_BYTES at boot.
   */
  maxFileBytes(): number;
  /**
   * The policy's model, if a valid policy is mounted and names one (detect falls back to MODEL). Detect reads it
   * once, at boot (a process loads one model); a changed spec.model reaches new pods, which the
   * operator rolls.
   */
  model(): ModelChoice | undefined;
  /**
   * The policy's frames scored of an animation, if a valid policy is mounted and states it (detect falls
   * back to MAX_FRAMES_SCORED); read once per request, like the thresholds.
   */
  maxFramesScored(): number | undefined;
  /** The name and generation of the DetectionPolicy in force; undefined while the configuration applies. */
  source(): PolicySource | undefined;
  /** Stops watching the file. */
  close(): void;
}

/** The limits the configuration sets (no policy file, or none valid yet). */
export function configuredLimits(config: PolicyConfig): QuotaLimits {
  return { anonymous: config.anonymous, tiers: config.tiers };
}

/** The limits a policy states, each window the policy leaves out as configured. */
export function mergedLimits(policy: PolicyDocument | undefined, configured: QuotaLimits): QuotaLimits {
  if (!policy) return configured;
  return {
    anonymous: policy.anonymous ?? configured.anonymous,
    tiers: {
      free: policy.tiers?.free ?? configured.tiers.free,
      pro: policy.tiers?.pro ?? configured.tiers.pro,
    },
  };
}

/** Watches POLICY_FILE when it is set; with no (valid) policy the configuration applies. */
export function policyInForce(config: PolicyConfig, log: PolicyLogger): PolicyInForce {
  const watch = config.policyFile ? new PolicyWatch(config.policyFile, log) : undefined;
  const fromConfig = configuredLimits(config);
  // Merged once per policy read, not per request.
  let merged = { policy: undefined as PolicyDocument | undefined, limits: fromConfig };
  return {
    thresholds: () => watch?.current()?.thresholds ?? config.thresholds,
    limits: () => {
      const policy = watch?.current();
      if (policy !== merged.policy) merged = { policy, limits: mergedLimits(policy, fromConfig) };
      return merged.limits;
    },
    maxFileBytes: () => Math.min(config.maxFileBytes, watch?.current()?.upload?.maxBytes ?? Infinity),
    model: () => watch?.current()?.model,
    maxFramesScored: () => watch?.current()?.maxFramesScored,
    source: () => watch?.current()?.source,
    close: () => watch?.close(),
  };
}

/**
 * policyInForce for an app: logged with the app's logger, no longer watched once the app closes, and
 * reported at GET /internal/policy (policy-report.ts).
 */
export function policyForApp(app: FastifyInstance, config: PolicyConfig): PolicyInForce {
  const policy = policyInForce(config, app.log);
  app.addHook('onClose', async () => policy.close());
  registerPolicyReport(app, policy.source, () => ({
    thresholds: policy.thresholds(),
    limits: policy.limits(),
    maxFileBytes: policy.maxFileBytes(),
  }));
  return policy;
}

/**
 * The model a detecting process loads, at boot only: one source of truth, the DetectionPolicy's
 * spec.model (its file wins over MODEL, which applies only while no valid file is mounted). A model is
 * loaded once per process; when spec.model changes the operator rolls the Deployment (pod-template
 * annotation nsfwdetector.io/model) and the new pods read the new file. The detect service and the
 * embedded server both load this one.
 */
export function modelAtBoot(
  policy: Pick<PolicyInForce, 'model'>,
  config: { model: ModelChoice },
): ModelChoice {
  return policy.model() ?? config.model;
}
