// The embedded composition: every route of every service in one Fastify instance, with in-process
// quota checks. The cluster wires the same plugins into separate processes behind Envoy.

import type { FastifyInstance } from 'fastify';
import type { ModelChoice } from '../../lib/common/model-catalogue.ts';
import { createRootApp, type RootAppOptions } from '../../lib/common/root-app.ts';
import { registerOpenApi } from '../../lib/openapi/app.ts';
import { modelAtBoot, policyForApp } from '../../lib/policy/policy-in-force.ts';
import detectApp from '../detect/app.ts';
import { HashListWatcher } from '../detect/hash-lists.ts';
import { intakeLimitsFrom } from '../detect/intake.ts';
import type { ScorerSlot } from '../detect/scoring/scorer-slot.ts';
import { WorkGate } from '../detect/work-gate.ts';
import healthApp from '../health/app.ts';
import { createAuthorizer, type QuotaDeps, registerConsole } from '../quota/app.ts';
import { storesReadyCheck } from '../quota/readiness.ts';
import type { AllInOneConfig } from './config.ts';

export interface EmbeddedDeps extends QuotaDeps {
  config: AllInOneConfig;
  model: ScorerSlot;
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean;
  /** Where log lines go (default stdout); tests capture them. */
  logStream?: RootAppOptions['logStream'];
  /** Rejects while the quota stores cannot answer (Redis down): readiness drops with them. */
  storesReady?: () => Promise<void>;
}

export interface EmbeddedApp {
  app: FastifyInstance;
  gate: WorkGate;
  /** The model to load into `deps.model`: the mounted policy's spec.model, else MODEL (as detect). */
  modelToLoad: ModelChoice;
}

export async function buildEmbeddedApp(deps: EmbeddedDeps): Promise<EmbeddedApp> {
  const { config } = deps;
  const app = createRootApp({ config, logger: deps.logger, logStream: deps.logStream });
  const gate = new WorkGate(config.concurrency);
  // POLICY_FILE (a policy file, as the operator renders it): thresholds, limits and the upload limit
  // from the next request on, as in the cluster's services.
  const policy = policyForApp(app, config);
  const live: EmbeddedDeps = { ...deps, limits: deps.limits ?? policy.limits };
  // First: the OpenAPI document collects the routes registered after it.
  await registerOpenApi(app);
  await app.register(healthApp);
  // PDQ_HASHES off: no list is loaded, no image hashed (auto: hashed while a list is in force).
  const hashLists = config.hashLists.enabled ? new HashListWatcher(config.hashLists, app.log) : undefined;
  hashLists?.start();
  app.addHook('onClose', async () => hashLists?.close());
  await app.register(detectApp, {
    ...(hashLists && { hashLists }),
    model: deps.model,
    authorizer: createAuthorizer(live, app.log),
    gate,
    thresholds: policy.thresholds,
    intake: intakeLimitsFrom(config),
    maxFileBytes: policy.maxFileBytes,
    limits: config.limits,
    scoringDeadlineMs: config.scoringDeadlineMs,
    maxTiles: config.maxTiles,
    maxFramesScored: () => policy.maxFramesScored() ?? config.maxFramesScored,
    ...(deps.storesReady ? { alsoReady: storesReadyCheck(deps.storesReady) } : {}),
  });
  await registerConsole(app, live);
  return { app, gate, modelToLoad: modelAtBoot(policy, config) };
}
