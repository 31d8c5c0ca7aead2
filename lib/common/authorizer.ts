// The admission capability: may this detect request run, and how is it counted? The quota service
// implements it (QuotaAuthorizer); the detect service only consumes it, so both depend on this file
// and detect never imports quota.

import type { ApiError } from './errors.ts';
import type { DetectEndpoint } from './routes.ts';

export type Tier = 'anonymous' | 'free' | 'pro';

/** The account id the edge hands on for anonymous requests: always set, so no client copy survives. */
export const ANONYMOUS_ACCOUNT = '-';

/** Who the trusted edge (Envoy after ext_authz) says a request is, in cluster mode. */
export interface EdgeIdentity {
  /** The account billed (ANONYMOUS_ACCOUNT for anonymous requests). */
  accountId: string;
  tier: Tier;
}

export interface RequestFacts {
  /** Which detect endpoint: the anonymous one (4.1) or the key one (4.2). */
  endpoint: DetectEndpoint;
  clientIp: string;
  /** The raw X-Device-Id header, if any; validated by the implementation. */
  deviceId?: string | undefined;
  authorization?: string | undefined;
  /** Names the charge, for `refund`; a fresh id when absent. */
  requestId?: string | undefined;
  /** Behind the edge: the identity ext_authz established (the request is counted already). */
  edgeIdentity?: EdgeIdentity | undefined;
}

export type Decision =
  | {
      allowed: true;
      tier: Tier;
      /** The quota subject counted (`anon:ip:…` or `acct:<accountId>`). */
      subject: string;
      /** Set on the key endpoint: the account the request is billed to. */
      accountId?: string;
      /** Headers for the client (X-RateLimit-*, X-Quota-Tier). */
      headers: Record<string, string>;
      /** Set when the request was counted: `refund(requestId)` takes the charge back. */
      requestId?: string;
    }
  | { allowed: false; error: ApiError };

export interface Authorizer {
  /** Decides and, when allowed, counts the request. */
  authorize(facts: RequestFacts): Promise<Decision>;
  /**
   * What `authorize` would decide, counting nothing: for a request that will be refused anyway (no
   * capacity), so that it still gets its 401 or 429 when that is its answer, and otherwise an
   * uncharged 503. An `allowed` answer counts nothing and carries no requestId.
   */
  check(facts: RequestFacts): Promise<Decision>;
  /**
   * Whether `authorize(facts)` needs a store lookup to answer: false when the answer is known without
   * one (a missing or malformed key: 401; an identity the edge established), so that the per-address
   * bound on lookups in progress never turns such an answer into a 503.
   */
  looksUp(facts: RequestFacts): boolean;
  /**
   * Takes back the charge of a counted request answered 503 (idempotent; never rejects). False when the
   * store could not (logged here): a caller that can ask again (the edge) knows to.
   */
  refund(requestId: string): Promise<boolean>;
}
