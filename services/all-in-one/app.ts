// The embedded composition: every route of every service in one Fastify instance, with in-process
// quota checks. The cluster wires the same plugins into separate processes behind Envoy.

import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { Config } from '../common/config.ts';
import { installEnvelopeHandlers } from '../common/envelope.ts';
import detectApp from '../detect/app.ts';
import type { ModelSlot } from '../detect/model/model-slot.ts';
import { WorkGate } from '../detect/work-gate.ts';
import healthApp from '../health/app.ts';
import type { AccountStore, SessionStore } from '../quota/account-store.ts';
import { accountSubject, type KeyQuota, QuotaAuthorizer } from '../quota/authorize.ts';
import consoleApp from '../quota/console/app.ts';
import type { QuotaStore } from '../quota/quota-store.ts';

export interface EmbeddedDeps {
  config: Config;
  model: ModelSlot;
  quotaStore: QuotaStore;
  /** Accounts and API keys: the file store embedded, Redis with REDIS_URL. */
  accountStore: AccountStore;
  /** Console sessions (same implementation as the account store). */
  sessionStore: SessionStore;
  /** The key path in one step (Redis: one script); default: account store, then quota store. */
  keyQuota?: KeyQuota;
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
  // Refused uploads are drained up to the upload limit (plus multipart framing), then cut.
  installEnvelopeHandlers(app, { maxDiscardBytes: config.maxFileBytes + 1024 * 1024 });
  const gate = new WorkGate(config.concurrency);
  await app.register(healthApp);
  await app.register(detectApp, {
    model: deps.model,
    authorizer: new QuotaAuthorizer({
      quotaStore: deps.quotaStore,
      accountStore: deps.accountStore,
      keyQuota: deps.keyQuota,
      anonymous: config.anonymous,
      tiers: config.tiers,
      onBackgroundError: (err, what) => app.log.warn({ err }, `failed: ${what}`),
    }),
    gate,
    thresholds: config.thresholds,
    intake: { maxBytes: config.maxFileBytes, idleTimeoutMs: config.uploadIdleTimeoutMs },
    limits: config.limits,
  });
  await app.register(consoleApp, {
    accounts: deps.accountStore,
    sessions: deps.sessionStore,
    quotaStore: deps.quotaStore,
    accountLimits: config.tiers,
    accountSubject,
  });
  return { app, gate };
}
