// authorize(facts) → decision: the one place that decides whether a detect request may run and how it
// is counted. Transports (the embedded server's in-process hook, Envoy's ext_authz call: ext-authz.ts)
// only translate to and from it.

import { randomUUID } from 'node:crypto';
import type { Authorizer, Decision, RequestFacts, Tier } from '../../lib/common/authorizer.ts';
import { ApiError, QUOTA_REFUSAL_MESSAGES } from '../../lib/common/errors.ts';
import type { QuotaLimits } from '../../lib/policy/policy-in-force.ts';
import type { WindowLimits } from '../../lib/policy/rules.ts';
import type { AccountStore, AccountTier, ResolvedKey } from './accounts/account-store.ts';
import { bearerKey } from './accounts/api-keys.ts';
import { outcomeOf, type QuotaOutcome, type QuotaStore } from './quota-store.ts';

export type { Authorizer, Decision, RequestFacts, Tier } from '../../lib/common/authorizer.ts';

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
  const anonymous = tier === 'anonymous';
  return outcome.refusedBy === 'day'
    ? {
        allowed: false,
        error: new ApiError(
          'DAILY_QUOTA',
          QUOTA_REFUSAL_MESSAGES.day(outcome.day.limit, outcome.day.resetAt, anonymous),
          retry,
        ),
      }
    : {
        allowed: false,
        error: new ApiError(
          'RATE_LIMITED',
          QUOTA_REFUSAL_MESSAGES.minute(outcome.minute.limit, outcome.minute.resetAt, anonymous),
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

/** The usage-history subject of one key (its account's history is under accountSubject); it names
 * the account too, so that a store can keep a key's history beside its account's. */
export function keySubject(accountId: string, keyId: string): string {
  return `${accountSubject(accountId)}/key:${keyId}`;
}

/** Resolves an API key and counts one request against its account's quota. */
export interface KeyQuota {
  /** Undefined when the key is unknown, revoked or orphaned: then nothing is counted. */
  consumeForKey(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
    requestId?: string,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined>;
  /** The same resolution and the outcome counting would have, counting nothing. */
  peekForKey(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined>;
}

/** The generic KeyQuota: the account store resolves, the quota store counts (two steps). */
export class ComposedKeyQuota implements KeyQuota {
  readonly #accounts: AccountStore;
  readonly #quota: QuotaStore;
  /** The quota store's clock: a look's Retry-After is counted from it. */
  readonly #now: () => number;

  constructor(accounts: AccountStore, quota: QuotaStore, now: () => number = Date.now) {
    this.#accounts = accounts;
    this.#quota = quota;
    this.#now = now;
  }

  async consumeForKey(secret: string, tiers: Record<AccountTier, WindowLimits>, requestId?: string) {
    const resolved = await this.#accounts.resolveKey(secret);
    if (!resolved) return undefined;
    const subject = accountSubject(resolved.account.id);
    const outcome = await this.#quota.consume(subject, tiers[resolved.account.tier], requestId, [
      subject,
      keySubject(resolved.account.id, resolved.key.id),
    ]);
    return { resolved, outcome };
  }

  async peekForKey(secret: string, tiers: Record<AccountTier, WindowLimits>) {
    const resolved = await this.#accounts.resolveKey(secret);
    if (!resolved) return undefined;
    const state = await this.#quota.peek(accountSubject(resolved.account.id), tiers[resolved.account.tier]);
    return { resolved, outcome: outcomeOf(state, this.#now()) };
  }
}

const REFUND_FAILURE_LOG_INTERVAL_MS = 10_000;

/** A key's last use is written at most this often (the listing's granularity), not on every request. */
export const TOUCH_INTERVAL_MS = 60_000;

export interface QuotaAuthorizerOptions {
  quotaStore: QuotaStore;
  accountStore: AccountStore;
  /**
   * The limits in force, read once per decision: a policy change (POLICY_FILE) applies to the next
   * request. The stores take limits per call, so nothing else holds on to them.
   */
  limits: () => QuotaLimits;
  /**
   * Key resolution + account counting; default: ComposedKeyQuota over the two stores. The Redis
   * composition passes RedisKeyQuota, which does both in one script (one round trip per request).
   */
  keyQuota?: KeyQuota;
  /** Failures of background work (recording a key's last use); the request itself is unaffected. */
  onBackgroundError?: (err: unknown, what: string) => void;
  /** A key's last use is recorded at most once per this interval (KEY_LAST_USED_INTERVAL_MS); default TOUCH_INTERVAL_MS. */
  touchIntervalMs?: number;
  now?: () => number;
}

export class QuotaAuthorizer implements Authorizer {
  readonly #opts: QuotaAuthorizerOptions;
  readonly #now: () => number;
  readonly #keyQuota: KeyQuota;
  readonly #touchedAt = new Map<string, number>();
  #refundFailures = 0;
  #refundFailureLoggedAt = Number.NEGATIVE_INFINITY;

  constructor(opts: QuotaAuthorizerOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#keyQuota = opts.keyQuota ?? new ComposedKeyQuota(opts.accountStore, opts.quotaStore, this.#now);
  }

  authorize(facts: RequestFacts): Promise<Decision> {
    const requestId = facts.requestId ?? randomUUID();
    return facts.endpoint === 'open'
      ? this.#authorizeKey(facts, requestId)
      : this.#authorizeAnonymous(facts, requestId);
  }

  async check(facts: RequestFacts): Promise<Decision> {
    try {
      if (facts.endpoint === 'public') {
        const subject = anonymousSubject(facts.clientIp);
        const state = await this.#opts.quotaStore.peek(subject, this.#opts.limits().anonymous);
        return decide(outcomeOf(state, this.#now()), 'anonymous', subject);
      }
      const secret = bearerKey(facts.authorization);
      if (secret === undefined) return { allowed: false, error: invalidKey(facts.authorization) };
      const result = await this.#keyQuota.peekForKey(secret, this.#opts.limits().tiers);
      if (!result) return { allowed: false, error: new ApiError('INVALID_API_KEY') };
      const { account } = result.resolved;
      const decision = decide(result.outcome, account.tier, accountSubject(account.id));
      return decision.allowed ? { ...decision, accountId: account.id } : decision;
    } catch (err) {
      return { allowed: false, error: storeUnavailable(err) };
    }
  }

  looksUp(facts: RequestFacts): boolean {
    return facts.endpoint === 'public' || bearerKey(facts.authorization) !== undefined;
  }

  refund(requestId: string): Promise<boolean> {
    return this.#opts.quotaStore.refund(requestId).then(
      () => true,
      (err: unknown) => {
        // While the store is down every refund fails the same way: one line per interval, with a count.
        this.#refundFailures += 1;
        const now = this.#now();
        if (now - this.#refundFailureLoggedAt < REFUND_FAILURE_LOG_INTERVAL_MS) return false;
        this.#refundFailureLoggedAt = now;
        const failures = this.#refundFailures;
        this.#refundFailures = 0;
        this.#opts.onBackgroundError?.(err, `refunding ${failures} request(s) answered 503`);
        return false;
      },
    );
  }

  async #authorizeAnonymous(facts: RequestFacts, requestId: string): Promise<Decision> {
    const { quotaStore } = this.#opts;
    const subject = anonymousSubject(facts.clientIp);
    let outcome: QuotaOutcome;
    try {
      outcome = await quotaStore.consume(subject, this.#opts.limits().anonymous, requestId);
    } catch (err) {
      return this.#unavailable(err, requestId);
    }
    const deviceId = validDeviceId(facts.deviceId);
    // Abuse tracking only: it never refuses, so its failure must not turn an allowed request into a 503.
    if (outcome.allowed && deviceId) {
      quotaStore.trackDevice(deviceId).catch((err: unknown) => {
        this.#opts.onBackgroundError?.(err, 'counting a device id');
      });
    }
    const decision = decide(outcome, 'anonymous', subject);
    return decision.allowed ? { ...decision, requestId: outcome.chargeId ?? requestId } : decision;
  }

  // Missing, malformed, revoked or unknown → 4011, never the anonymous quota (spec 5.3). The key is
  // looked up in the store on every request: revocation and tier changes apply to the next one.
  async #authorizeKey(facts: RequestFacts, requestId: string): Promise<Decision> {
    const secret = bearerKey(facts.authorization);
    if (secret === undefined) return { allowed: false, error: invalidKey(facts.authorization) };
    let result: Awaited<ReturnType<KeyQuota['consumeForKey']>>;
    try {
      result = await this.#keyQuota.consumeForKey(secret, this.#opts.limits().tiers, requestId);
    } catch (err) {
      return this.#unavailable(err, requestId);
    }
    if (!result) return { allowed: false, error: new ApiError('INVALID_API_KEY') };
    const { outcome, resolved } = result;
    const { account, key } = resolved;
    const subject = accountSubject(account.id);
    if (outcome.allowed) this.#touch(key.id, key.lastUsedAt);
    const decision = decide(outcome, account.tier, subject);
    return decision.allowed
      ? { ...decision, accountId: account.id, requestId: outcome.chargeId ?? requestId }
      : decision;
  }

  // The store failed or timed out. A timed-out script may still have run (Redis got it, the answer
  // came too late, e.g. on a busy event loop): the 503 must not cost quota, so the charge is taken
  // back — or, should the script still be on its way, cancelled. A command that was never sent
  // (connection down) needs no refund.
  #unavailable(err: unknown, requestId: string): Decision {
    if (!neverSent(err)) void this.refund(requestId);
    return { allowed: false, error: storeUnavailable(err) };
  }

  // Only the time of our own last write is remembered (to not send a burst of identical writes while
  // the first is in flight); nothing about the key's validity is cached.
  #touch(keyId: string, lastUsedAt: string | null): void {
    const now = this.#now();
    const interval = this.#opts.touchIntervalMs ?? TOUCH_INTERVAL_MS;
    if (lastUsedAt !== null && now - Date.parse(lastUsedAt) < interval) return;
    if (now - (this.#touchedAt.get(keyId) ?? Number.NEGATIVE_INFINITY) < interval) return;
    if (this.#touchedAt.size >= 10_000) this.#touchedAt.clear();
    this.#touchedAt.set(keyId, now);
    this.#opts.accountStore.touchKey(keyId, new Date(now)).catch((err: unknown) => {
      this.#opts.onBackgroundError?.(err, 'recording the last use of an API key');
    });
  }
}

function anonymousSubject(clientIp: string): string {
  return `anon:ip:${clientIp}`;
}

/** ioredis refuses a command at once, unsent, while the connection is down (no offline queue). */
function neverSent(err: unknown): boolean {
  return err instanceof Error && err.message.includes("isn't writeable");
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

  check(): Promise<Decision> {
    return this.authorize();
  }

  looksUp(): boolean {
    return false;
  }

  async refund(): Promise<boolean> {
    return true;
  }
}
