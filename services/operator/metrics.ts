// The operator's Prometheus series (prom-client, its own registry, default process series like the
// services in lib/common/metrics.ts).

import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export interface OperatorMetrics {
  registry: Registry;
  reconciles: Counter<'kind' | 'result'>;
  errors: Counter<'kind'>;
  duration: Histogram<'kind'>;
  queueDepth: Gauge<'kind'>;
  leader: Gauge;
}

export function createOperatorMetrics(): OperatorMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'operator' });
  collectDefaultMetrics({ register: registry, prefix: 'nsfwdetector_' });
  for (const name of [
    'nodejs_active_handles_total',
    'nodejs_active_requests_total',
    'nodejs_active_resources_total',
  ]) {
    registry.removeSingleMetric(`nsfwdetector_${name}`);
  }
  return {
    registry,
    reconciles: new Counter({
      name: 'nsfwdetector_operator_reconciles_total',
      help: 'Reconciles finished, by resource kind and result (rendered, reconciled, superseded, invalid, finalized, ...).',
      labelNames: ['kind', 'result'],
      registers: [registry],
    }),
    errors: new Counter({
      name: 'nsfwdetector_operator_reconcile_errors_total',
      help: 'Reconciles that failed and were requeued with backoff, by resource kind.',
      labelNames: ['kind'],
      registers: [registry],
    }),
    duration: new Histogram({
      name: 'nsfwdetector_operator_reconcile_duration_seconds',
      help: 'Time of one reconcile, by resource kind.',
      labelNames: ['kind'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    queueDepth: new Gauge({
      name: 'nsfwdetector_operator_queue_depth',
      help: 'Keys waiting in the work queue, by resource kind.',
      labelNames: ['kind'],
      registers: [registry],
    }),
    leader: new Gauge({
      name: 'nsfwdetector_operator_leader',
      help: '1 while this replica holds the leader Lease.',
      registers: [registry],
    }),
  };
}
