// The quota service's own Prometheus series, on its process's registry (lib/common/metrics.ts), fed by
// the decorator its composition root wraps around the authorizer (metered-authorizer.ts).

import { Counter, type Registry } from 'prom-client';

/** The quota service's own series. */
export interface QuotaMetrics {
  decisions: Counter<'tier' | 'outcome'>;
  redisErrors: Counter<'connection' | 'kind'>;
}

export function createQuotaMetrics(registry: Registry): QuotaMetrics {
  return {
    decisions: new Counter({
      name: 'nsfwdetector_quota_decisions_total',
      help: 'Admission decisions: tier (anonymous, free, pro, unknown for a bad key) and outcome.',
      labelNames: ['tier', 'outcome'],
      registers: [registry],
    }),
    redisErrors: new Counter({
      name: 'nsfwdetector_redis_errors_total',
      help: 'Redis failures: connection errors (per connection) and quota checks failed by the store.',
      labelNames: ['connection', 'kind'],
      registers: [registry],
    }),
  };
}
