// The embedded composition: every route of every service in one Fastify instance, with in-process
// quota checks. The cluster wires the same plugins into separate processes behind Envoy.

import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { Config } from '../common/config.ts';
import { installEnvelopeHandlers } from '../common/envelope.ts';
import detectApp from '../detect/app.ts';
import type { ModelSlot } from '../detect/model/model-slot.ts';
import { WorkGate } from '../detect/work-gate.ts';
import healthApp from '../health/app.ts';
import { QuotaAuthorizer } from '../quota/authorize.ts';
import type { QuotaStore } from '../quota/quota-store.ts';

export interface EmbeddedDeps {
  config: Config;
  model: ModelSlot;
  quotaStore: QuotaStore;
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean;
}

export interface EmbeddedApp {
  app: FastifyInstance;
  gate: WorkGate;
}

export async function buildEmbeddedApp(deps: EmbeddedDeps): Promise<EmbeddedApp> {
  const { config } = deps;
  const app = Fastify({
    logger: deps.logger === false ? false : { level: config.logLevel },
    // Only failures are logged (5xx, by the error handler); never request bodies.
    logController: new LogController({ disableRequestLogging: true }),
    // Trust exactly as many X-Forwarded-For hops as the edge in front of us adds.
    trustProxy: (_address: string, hop: number) => hop < config.trustedProxyHops,
    // A stalled upload must not hold a ticket forever.
    requestTimeout: 120_000,
    connectionTimeout: 130_000,
    // Shutdown answers through the work gate, in the envelope shape, not Fastify's bare 503.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
  });
  installEnvelopeHandlers(app);
  const gate = new WorkGate(config.concurrency);
  await app.register(healthApp);
  await app.register(detectApp, {
    model: deps.model,
    authorizer: new QuotaAuthorizer(deps.quotaStore, config.anonymous),
    gate,
    thresholds: config.thresholds,
    maxFileBytes: config.maxFileBytes,
    limits: config.limits,
  });
  return { app, gate };
}
