// The admission capability: may this detect request run, and how is it counted? The quota service
// implements it (QuotaAuthorizer); the detect service only consumes it, so both depend on this file
// and detect never imports quota.

import type { ApiError } from './errors.ts';

export type Tier = 'anonymous' | 'free' | 'pro';

export interface RequestFacts {
  /** Which detect endpoint: the anonymous one (4.1) or the key one (4.2). */
  endpoint: 'public' | 'open';
  clientIp: string;
  /** The raw X-Device-Id header, if any; validated by the implementation. */
  deviceId?: string | undefined;
  authorization?: string | undefined;
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
    }
  | { allowed: false; error: ApiError };

export interface Authorizer {
  authorize(facts: RequestFacts): Promise<Decision>;
}
