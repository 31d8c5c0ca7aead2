// The quota-and-auth service as a Fastify plugin: the ext_authz check endpoint Envoy calls before every
// detect request, and liveness/readiness probes. The composition root hands it the authorizer; it
// never chooses store implementations itself. `buildQuotaService` adds the console beside it.

import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { Config } from '../common/config.ts';
import { installEnvelopeHandlers, ok } from '../common/envelope.ts';
import type { AccountStore, SessionStore } from './account-store.ts';
import { type Authorizer, accountSubject, type KeyQuota, QuotaAuthorizer } from './authorize.ts';
import consoleApp from './console/app.ts';
import extAuthz from './ext-authz.ts';
import type { QuotaStore } from './quota-store.ts';

export interface QuotaAppOptions {
  authorizer: Authorizer;
  /** Envoy's ext_authz `path_prefix`; default /ext_authz. */
  pathPrefix?: string;
}

export default async function quotaApp(app: FastifyInstance, opts: QuotaAppOptions): Promise<void> {
  await app.register(extAuthz, { authorizer: opts.authorizer, pathPrefix: opts.pathPrefix });
  app.get('/internal/live', async () => ok({ status: 'ok' }));
  // Ready as soon as the process is up: a Redis outage is answered per request (503/5001), and taking
  // every replica out of rotation would only turn those answers into connection errors.
  app.get('/internal/ready', async () => ok({ status: 'ready' }));
}

export interface QuotaServiceDeps {
  config: Config;
  quotaStore: QuotaStore;
  accountStore: AccountStore;
  sessionStore: SessionStore;
  /** The key path in one step (Redis: one script); default: account store, then quota store. */
  keyQuota?: KeyQuota;
  /** Tests pass `false` to keep output quiet. */
  logger?: boolean;
}

/** The quota service's root instance (ext_authz + console), as its thin server runs it; tests inject. */
export async function buildQuotaService(deps: QuotaServiceDeps): Promise<FastifyInstance> {
  const { config } = deps;
  const app = Fastify({
    logger: deps.logger === false ? false : { level: config.logLevel },
    logController: new LogController({ disableRequestLogging: true }),
    // Behind Envoy the client address is the X-Forwarded-For entry Envoy appended (TRUSTED_PROXY_HOPS=1).
    trustProxy: (_address: string, hop: number) => hop < config.trustedProxyHops,
    forceCloseConnections: 'idle',
  });
  installEnvelopeHandlers(app);
  const authorizer = new QuotaAuthorizer({
    quotaStore: deps.quotaStore,
    accountStore: deps.accountStore,
    keyQuota: deps.keyQuota,
    anonymous: config.anonymous,
    tiers: config.tiers,
    onBackgroundError: (err, what) => app.log.warn({ err }, `failed: ${what}`),
  });
  await app.register(quotaApp, { authorizer });
  // In the cluster the console (accounts, API keys) is served by this service, behind Envoy.
  await app.register(consoleApp, {
    accounts: deps.accountStore,
    sessions: deps.sessionStore,
    quotaStore: deps.quotaStore,
    accountLimits: config.tiers,
    accountSubject,
  });
  return app;
}
