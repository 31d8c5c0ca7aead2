// The quota-and-auth service as a Fastify plugin: the ext_authz check endpoint Envoy calls before every
// detect request, and liveness/readiness probes. The composition root hands it the authorizer; it
// never chooses store implementations itself. `buildQuotaService` adds the console beside it.

import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { CoreConfig } from '../../lib/common/config.ts';
import { type HttpMetrics, instrumentHttp } from '../../lib/common/metrics.ts';
import { registerProbes } from '../../lib/common/probes.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import type { PolicyConfig } from '../../lib/policy/policy-config.ts';
import { configuredLimits, policyForApp, type QuotaLimits } from '../../lib/policy/policy-in-force.ts';
import type { AccountStore, SessionStore } from './accounts/account-store.ts';
import { type Authorizer, accountSubject, type KeyQuota, QuotaAuthorizer } from './authorize.ts';
import type { KeyUseConfig, SignupConfig } from './config.ts';
import consoleApp from './console/app.ts';
import extAuthz from './ext-authz.ts';
import { MeteredAuthorizer } from './metered-authorizer.ts';
import type { QuotaMetrics } from './metrics.ts';
import type { QuotaStore } from './quota-store.ts';
import { storesReadyCheck } from './readiness.ts';
import type { SharedBudgetStore } from './shared-budget.ts';

export interface QuotaAppOptions {
  authorizer: Authorizer;
  /** Envoy's ext_authz `path_prefix`; default /ext_authz. */
  pathPrefix?: string;
  /** Rejects while the stores cannot answer (Redis down); default: always ready. */
  storesReady?: () => Promise<void>;
}

export default async function quotaApp(app: FastifyInstance, opts: QuotaAppOptions): Promise<void> {
  await app.register(extAuthz, { authorizer: opts.authorizer, pathPrefix: opts.pathPrefix });
  // Ready only while the stores answer (one bounded PING with Redis): a replica that cannot decide
  // leaves rotation, and Envoy's ext_authz answers 503/5001 for it meanwhile. Liveness stays up, so
  // a Redis outage never restarts the pod; it becomes ready again by itself when Redis is back.
  registerProbes(app, opts.storesReady ? { ready: storesReadyCheck(opts.storesReady) } : {});
}

/** What the quota-and-auth service works on: the stores, chosen at a composition root. */
export interface QuotaDeps {
  config: CoreConfig & PolicyConfig & SignupConfig & Partial<KeyUseConfig>;
  quotaStore: QuotaStore & SharedBudgetStore;
  /** Accounts and API keys: the file store embedded, Redis with REDIS_URL. */
  accountStore: AccountStore;
  /** Console sessions (same implementation as the account store). */
  sessionStore: SessionStore;
  /** The key path in one step (Redis: one script); default: account store, then quota store. */
  keyQuota?: KeyQuota;
  /** The limits in force, read per decision (policyInForce: POLICY_FILE); default: the configuration's. */
  limits?: () => QuotaLimits;
}

/** authorize() on the stores with the limits in force; failures of background work go to `log`. */
export function createAuthorizer(deps: QuotaDeps, log: Pick<FastifyBaseLogger, 'warn'>): QuotaAuthorizer {
  const fromConfig = configuredLimits(deps.config);
  return new QuotaAuthorizer({
    quotaStore: deps.quotaStore,
    accountStore: deps.accountStore,
    keyQuota: deps.keyQuota,
    limits: deps.limits ?? (() => fromConfig),
    onBackgroundError: (err, what) => log.warn({ err }, `failed: ${what}`),
    ...(deps.config.keyLastUsedIntervalMs === undefined
      ? {}
      : { touchIntervalMs: deps.config.keyLastUsedIntervalMs }),
  });
}

/** The console (accounts, API keys, usage) on the same stores, showing the limits in force. */
export function registerConsole(app: FastifyInstance, deps: QuotaDeps) {
  const { limits } = deps;
  return app.register(consoleApp, {
    accounts: deps.accountStore,
    sessions: deps.sessionStore,
    quotaStore: deps.quotaStore,
    accountLimits: limits ? () => limits().tiers : deps.config.tiers,
    accountSubject,
    signupTotal: deps.config.signupTotal,
    signupNetworkSharePercent: deps.config.signupNetworkSharePercent,
    networkPrefixes: deps.config.networkPrefixes,
  });
}

export interface QuotaServiceDeps extends QuotaDeps {
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean;
  /** Readiness: rejects while the stores cannot answer. */
  storesReady?: () => Promise<void>;
  /** The server's metrics: every request is counted, every decision too. */
  metrics?: { http: HttpMetrics; quota: QuotaMetrics; redis: boolean };
}

/** The quota service's root instance (ext_authz + console), as its thin server runs it; tests inject. */
export async function buildQuotaService(deps: QuotaServiceDeps): Promise<FastifyInstance> {
  const app = createRootApp({
    config: deps.config,
    ...(deps.logger === undefined ? {} : { logger: deps.logger }),
  });
  const { metrics } = deps;
  if (metrics) instrumentHttp(app, metrics.http);
  // POLICY_FILE (the operator's ConfigMap, mounted): its limits reach the next decision.
  deps = { ...deps, limits: deps.limits ?? policyForApp(app, deps.config).limits };
  const authorizer = createAuthorizer(deps, app.log);
  await app.register(quotaApp, {
    authorizer: metrics
      ? new MeteredAuthorizer(authorizer, metrics.quota, { redis: metrics.redis })
      : authorizer,
    ...(deps.storesReady ? { storesReady: deps.storesReady } : {}),
  });
  // In the cluster the console is served by this service, behind Envoy.
  await registerConsole(app, deps);
  return app;
}
