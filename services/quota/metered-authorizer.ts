// Counts every admission decision by tier and outcome (metrics.ts), and quota checks
// the store could not answer as Redis errors when the store is Redis. Wraps the real authorizer.

import type { Authorizer, Decision, RequestFacts } from '../../lib/common/authorizer.ts';
import { errorNameForCode } from '../../lib/common/errors.ts';
import type { QuotaMetrics } from './metrics.ts';

export class MeteredAuthorizer implements Authorizer {
  readonly #inner: Authorizer;
  readonly #metrics: QuotaMetrics;
  readonly #redis: boolean;

  constructor(inner: Authorizer, metrics: QuotaMetrics, opts: { redis: boolean }) {
    this.#inner = inner;
    this.#metrics = metrics;
    this.#redis = opts.redis;
  }

  async authorize(facts: RequestFacts): Promise<Decision> {
    const decision = await this.#inner.authorize(facts);
    if (decision.allowed) {
      this.#metrics.decisions.inc({ tier: decision.tier, outcome: 'allowed' });
      return decision;
    }
    const { error } = decision;
    // Refusals carry X-Quota-Tier when the tier is known (429); a bad key has none.
    const tier = error.headers['x-quota-tier'] ?? (facts.endpoint === 'public' ? 'anonymous' : 'unknown');
    const outcome = (errorNameForCode(error.code) ?? String(error.code)).toLowerCase();
    this.#metrics.decisions.inc({ tier, outcome });
    if (this.#redis && error.status >= 500)
      this.#metrics.redisErrors.inc({ connection: 'any', kind: 'command' });
    return decision;
  }

  check(facts: RequestFacts): Promise<Decision> {
    return this.#inner.check(facts);
  }

  looksUp(facts: RequestFacts): boolean {
    return this.#inner.looksUp(facts);
  }

  refund(requestId: string): Promise<boolean> {
    return this.#inner.refund(requestId);
  }
}
