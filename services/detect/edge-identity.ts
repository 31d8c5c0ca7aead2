// Cluster mode: detect does no quota work. Envoy's ext_authz call to the quota service has already
// admitted the request and counted it; Envoy strips client-sent `x-account-id` / `x-quota-tier`
// before that call and adds the quota service's values after it. Detect reads them, trusting them
// only from the edge:
// - the chart's NetworkPolicy lets only the gateway pods reach detect (the first guard);
// - with EDGE_SECRET set, a request must also carry `x-edge-secret` with that value, which Envoy adds
//   to every request it routes to detect (so a pod that slipped past the policy cannot pose as an
//   account either).
// A detect request without both identity headers (or with a wrong secret) did not come through
// ext_authz and is refused 401/4011. The X-RateLimit-* headers the client sees are the quota
// service's, added by Envoy: detect sets none (EdgeAuthorizer).
//
// Fairness holds here as in the embedded server: the work gate bounds uploads in progress per client,
// and the client is the account the edge names on the key endpoint, and on the anonymous one the
// address Envoy appended to X-Forwarded-For (request.ip: the root app trusts exactly the hops the
// edge adds, TRUSTED_PROXY_HOPS, so entries a client wrote itself are never taken).

import { timingSafeEqual } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  ANONYMOUS_ACCOUNT,
  type Authorizer,
  type Decision,
  type RequestFacts,
  type Tier,
} from '../../lib/common/authorizer.ts';
import { ApiError } from '../../lib/common/errors.ts';
import { headerValue } from '../../lib/common/header-value.ts';
import { detectEndpointOf } from '../../lib/common/routes.ts';

export const EDGE_SECRET_HEADER = 'x-edge-secret';
const TIERS: readonly Tier[] = ['anonymous', 'free', 'pro'];

function header(request: FastifyRequest, name: string): string | undefined {
  return headerValue(request.headers[name]);
}

function sameSecret(given: string | undefined, expected: Buffer): boolean {
  if (given === undefined) return false;
  const bytes = Buffer.from(given);
  return bytes.length === expected.length && timingSafeEqual(bytes, expected);
}

const notFromEdge = () =>
  new ApiError('INVALID_API_KEY', 'Not admitted: detect requests must come through the gateway');

/**
 * Root hook (call before registering the detect plugin, so it runs before its admission): reads the
 * edge's identity headers on detect routes, or refuses.
 */
export function requireEdgeIdentity(app: FastifyInstance, opts: { secret: string | undefined }): void {
  const secret = opts.secret === undefined ? undefined : Buffer.from(opts.secret);
  app.addHook('onRequest', async (request) => {
    if (!detectEndpointOf(request.routeOptions.url ?? '')) return;
    if (secret && !sameSecret(header(request, EDGE_SECRET_HEADER), secret)) throw notFromEdge();
    const accountId = header(request, 'x-account-id');
    const tier = header(request, 'x-quota-tier') as Tier | undefined;
    if (!accountId || !tier || !TIERS.includes(tier)) throw notFromEdge();
    request.edgeIdentity = { accountId, tier };
    trace.getActiveSpan()?.setAttributes({ 'nsfwdetector.account_id': accountId, 'nsfwdetector.tier': tier });
  });
}

/**
 * The detect plugin's authorizer behind the edge: admitted (and counted) already by ext_authz, no
 * headers of its own; it hands on the account the edge named, so that the work gate bounds that
 * account's uploads. Nothing is counted here, so there is nothing to refund.
 */
export class EdgeAuthorizer implements Authorizer {
  async authorize(facts: RequestFacts): Promise<Decision> {
    const identity = facts.edgeIdentity;
    const anonymous = identity?.accountId === ANONYMOUS_ACCOUNT;
    // requireEdgeIdentity refuses such requests first; the key endpoint is never anonymous.
    if (!identity || (facts.endpoint === 'open' && anonymous))
      return { allowed: false, error: notFromEdge() };
    if (anonymous)
      return { allowed: true, tier: identity.tier, subject: `edge:ip:${facts.clientIp}`, headers: {} };
    return {
      allowed: true,
      tier: identity.tier,
      subject: `edge:acct:${identity.accountId}`,
      accountId: identity.accountId,
      headers: {},
    };
  }

  check(facts: RequestFacts): Promise<Decision> {
    return this.authorize(facts);
  }

  // The edge established the identity: nothing to look up.
  looksUp(): boolean {
    return false;
  }

  // The edge's quota service holds the charges: nothing to take back here.
  async refund(): Promise<boolean> {
    return true;
  }
}
