// authorize(facts) → decision: the one place that decides whether a detect request may run and how it
// is counted. Transports (in-process hook now, Envoy ext_authz later) only translate to and from it.

import type { WindowLimits } from '../common/config.ts';
import { ApiError } from '../common/errors.ts';
import type { QuotaOutcome, QuotaStore } from './quota-store.ts';

export type Tier = 'anonymous' | 'free' | 'pro';

export interface RequestFacts {
  /** Which detect endpoint: the anonymous one (4.1) or the key one (4.2). */
  endpoint: 'public' | 'open';
  clientIp: string;
  /** The raw X-Device-Id header, if any; validated here. */
  deviceId?: string | undefined;
  authorization?: string | undefined;
}

export type Decision =
  | { allowed: true; tier: Tier; subject: string; headers: Record<string, string> }
  | { allowed: false; error: ApiError };

export interface Authorizer {
  authorize(facts: RequestFacts): Promise<Decision>;
}

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

export function validDeviceId(raw: string | undefined): string | undefined {
  return raw !== undefined && UUID_V4.test(raw) ? raw.toLowerCase() : undefined;
}

/** X-RateLimit-* headers, reporting the daily window (spec 4.2; sent for anonymous callers too). */
export function rateLimitHeaders(outcome: QuotaOutcome, tier: Tier): Record<string, string> {
  return {
    'x-ratelimit-limit': String(outcome.day.limit),
    'x-ratelimit-remaining': String(Math.max(0, outcome.day.limit - outcome.day.used)),
    'x-ratelimit-reset': String(outcome.day.resetAt),
    'x-quota-tier': tier,
  };
}

/** Turns a store outcome into a decision; refusals carry Retry-After and the same headers. */
export function decide(outcome: QuotaOutcome, tier: Tier, subject: string): Decision {
  const headers = rateLimitHeaders(outcome, tier);
  if (outcome.allowed) return { allowed: true, tier, subject, headers };
  const retry = { ...headers, 'retry-after': String(outcome.retryAfterSeconds) };
  return outcome.refusedBy === 'day'
    ? {
        allowed: false,
        error: new ApiError('DAILY_QUOTA', `Daily quota of ${outcome.day.limit} requests used`, retry),
      }
    : {
        allowed: false,
        error: new ApiError(
          'RATE_LIMITED',
          `Rate limited: ${outcome.minute.limit} requests per minute`,
          retry,
        ),
      };
}

/** A store that cannot answer means "unknown": 503/5001, never a silent allow. */
export function storeUnavailable(cause: unknown): ApiError {
  return new ApiError(
    'UNAVAILABLE',
    'Quota store unavailable; try again shortly',
    { 'retry-after': '1' },
    cause,
  );
}

export class QuotaAuthorizer implements Authorizer {
  readonly #store: QuotaStore;
  readonly #anonymous: WindowLimits;

  constructor(store: QuotaStore, anonymous: WindowLimits) {
    this.#store = store;
    this.#anonymous = anonymous;
  }

  async authorize(facts: RequestFacts): Promise<Decision> {
    if (facts.endpoint === 'open') {
      // Accounts and keys arrive with the quota issue; until then no key can be valid.
      return { allowed: false, error: new ApiError('INVALID_API_KEY') };
    }
    const subject = `anon:ip:${facts.clientIp}`;
    try {
      const outcome = await this.#store.consume(subject, this.#anonymous);
      const deviceId = validDeviceId(facts.deviceId);
      if (outcome.allowed && deviceId) await this.#store.trackDevice(deviceId);
      return decide(outcome, 'anonymous', subject);
    } catch (err) {
      return { allowed: false, error: storeUnavailable(err) };
    }
  }
}

/** For a detect service behind Envoy, where ext_authz already decided. */
export class AllowAllAuthorizer implements Authorizer {
  async authorize(): Promise<Decision> {
    return { allowed: true, tier: 'anonymous', subject: 'edge', headers: {} };
  }
}
