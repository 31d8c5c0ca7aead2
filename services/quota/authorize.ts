// authorize(facts) → decision: the one place that decides whether a detect request may run and how it
// is counted. Transports (in-process hook now, Envoy ext_authz later) only translate to and from it.

import type { Authorizer, Decision, RequestFacts, Tier } from '../common/authorizer.ts';
import type { WindowLimits } from '../common/config.ts';
import { ApiError } from '../common/errors.ts';
import type { AccountStore, AccountTier, ResolvedKey } from './account-store.ts';
import { bearerKey } from './api-keys.ts';
import type { QuotaOutcome, QuotaStore } from './quota-store.ts';

export type { Authorizer, Decision, RequestFacts, Tier } from '../common/authorizer.ts';

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

/** The quota subject of an account: all its keys share it (spec 5.4). */
export function accountSubject(accountId: string): string {
  return `acct:${accountId}`;
}

/** Resolves an API key and counts one request against its account's quota. */
export interface KeyQuota {
  /** Undefined when the key is unknown, revoked or orphaned: then nothing is counted. */
  consumeForKey(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined>;
}

/** The generic KeyQuota: the account store resolves, the quota store counts (two steps). */
export class ComposedKeyQuota implements KeyQuota {
  readonly #accounts: AccountStore;
  readonly #quota: QuotaStore;

  constructor(accounts: AccountStore, quota: QuotaStore) {
    this.#accounts = accounts;
    this.#quota = quota;
  }

  async consumeForKey(secret: string, tiers: Record<AccountTier, WindowLimits>) {
    const resolved = await this.#accounts.resolveKey(secret);
    if (!resolved) return undefined;
    const outcome = await this.#quota.consume(
      accountSubject(resolved.account.id),
      tiers[resolved.account.tier],
    );
    return { resolved, outcome };
  }
}

/** A key's last use is written at most this often (the listing's granularity), not on every request. */
export const TOUCH_INTERVAL_MS = 60_000;

export interface QuotaAuthorizerOptions {
  quotaStore: QuotaStore;
  accountStore: AccountStore;
  anonymous: WindowLimits;
  tiers: Record<AccountTier, WindowLimits>;
  /**
   * Key resolution + account counting; default: ComposedKeyQuota over the two stores. The Redis
   * composition passes RedisKeyQuota, which does both in one script (one round trip per request).
   */
  keyQuota?: KeyQuota;
  /** Failures of background work (recording a key's last use); the request itself is unaffected. */
  onBackgroundError?: (err: unknown, what: string) => void;
  now?: () => number;
}

export class QuotaAuthorizer implements Authorizer {
  readonly #opts: QuotaAuthorizerOptions;
  readonly #now: () => number;
  readonly #keyQuota: KeyQuota;
  readonly #touchedAt = new Map<string, number>();

  constructor(opts: QuotaAuthorizerOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#keyQuota = opts.keyQuota ?? new ComposedKeyQuota(opts.accountStore, opts.quotaStore);
  }

  authorize(facts: RequestFacts): Promise<Decision> {
    return facts.endpoint === 'open' ? this.#authorizeKey(facts) : this.#authorizeAnonymous(facts);
  }

  async #authorizeAnonymous(facts: RequestFacts): Promise<Decision> {
    const { quotaStore } = this.#opts;
    const subject = `anon:ip:${facts.clientIp}`;
    try {
      const outcome = await quotaStore.consume(subject, this.#opts.anonymous);
      const deviceId = validDeviceId(facts.deviceId);
      if (outcome.allowed && deviceId) await quotaStore.trackDevice(deviceId);
      return decide(outcome, 'anonymous', subject);
    } catch (err) {
      return { allowed: false, error: storeUnavailable(err) };
    }
  }

  // Missing, malformed, revoked or unknown → 4011, never the anonymous quota (spec 5.3). The key is
  // looked up in the store on every request: revocation and tier changes apply to the next one.
  async #authorizeKey(facts: RequestFacts): Promise<Decision> {
    const secret = bearerKey(facts.authorization);
    if (secret === undefined) return { allowed: false, error: invalidKey(facts.authorization) };
    try {
      const result = await this.#keyQuota.consumeForKey(secret, this.#opts.tiers);
      if (!result) return { allowed: false, error: new ApiError('INVALID_API_KEY') };
      const { outcome, resolved } = result;
      const { account, key } = resolved;
      const subject = accountSubject(account.id);
      if (outcome.allowed) this.#touch(key.id, key.lastUsedAt);
      const decision = decide(outcome, account.tier, subject);
      return decision.allowed ? { ...decision, accountId: account.id } : decision;
    } catch (err) {
      return { allowed: false, error: storeUnavailable(err) };
    }
  }

  // Only the time of our own last write is remembered (to not send a burst of identical writes while
  // the first is in flight); nothing about the key's validity is cached.
  #touch(keyId: string, lastUsedAt: string | null): void {
    const now = this.#now();
    if (lastUsedAt !== null && now - Date.parse(lastUsedAt) < TOUCH_INTERVAL_MS) return;
    if (now - (this.#touchedAt.get(keyId) ?? Number.NEGATIVE_INFINITY) < TOUCH_INTERVAL_MS) return;
    if (this.#touchedAt.size >= 10_000) this.#touchedAt.clear();
    this.#touchedAt.set(keyId, now);
    this.#opts.accountStore.touchKey(keyId, new Date(now)).catch((err: unknown) => {
      this.#opts.onBackgroundError?.(err, 'recording the last use of an API key');
    });
  }
}

function invalidKey(authorization: string | undefined): ApiError {
  if (authorization === undefined)
    return new ApiError('INVALID_API_KEY', 'Missing API key: send Authorization: Bearer nsk_live_…');
  return new ApiError(
    'INVALID_API_KEY',
    'Malformed API key: expected Authorization: Bearer nsk_live_ + 32 hex',
  );
}

/** For a detect service behind Envoy, where ext_authz already decided. */
export class AllowAllAuthorizer implements Authorizer {
  async authorize(): Promise<Decision> {
    return { allowed: true, tier: 'anonymous', subject: 'edge', headers: {} };
  }
}
