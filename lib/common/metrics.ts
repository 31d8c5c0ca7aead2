// Prometheus metrics (prom-client), one registry per service process, scraped at GET /metrics on the
// service's own port: the process's default series and the HTTP series, recorded here for every route.
// A service's own series are defined beside it (services/detect/metrics.ts, services/quota/metrics.ts)
// on the registry made here.

import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

export type ServiceName = 'detect' | 'quota' | 'health';

export interface HttpMetrics {
  registry: Registry;
  requests: Counter<'route' | 'method' | 'status' | 'code'>;
  duration: Histogram<'route' | 'method' | 'status'>;
}

/** Seconds; from sub-millisecond probes to a 50 MiB upload scored on a busy box. */
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

const NON_COUNTER_TOTALS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** A fresh registry with the process's default series and the HTTP series, labelled by service. */
export function createHttpMetrics(service: ServiceName): HttpMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry, prefix: 'nsfwdetector_' });
  // prom-client names these gauges *_total, which `promtool check metrics` rejects (a counter suffix).
  for (const name of NON_COUNTER_TOTALS) registry.removeSingleMetric(`nsfwdetector_${name}`);
  return {
    registry,
    requests: new Counter({
      name: 'nsfwdetector_http_requests_total',
      help: 'HTTP requests answered, by route pattern, method, status and spec code (0 = ok).',
      labelNames: ['route', 'method', 'status', 'code'],
      registers: [registry],
    }),
    duration: new Histogram({
      name: 'nsfwdetector_http_request_duration_seconds',
      help: 'Time from the request arriving to the response finished, by route pattern, method and status.',
      labelNames: ['route', 'method', 'status'],
      buckets: HTTP_BUCKETS,
      registers: [registry],
    }),
  };
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The envelope code of the response, read from its serialized body. */
    specCode?: string;
  }
}

const METRICS_PATH = '/metrics';

/** The spec code of a serialized envelope: {"code":N,...} always starts the body (envelope.ts). */
function envelopeCode(payload: unknown): string | undefined {
  if (typeof payload !== 'string') return undefined;
  const match = /^\{"code":(\d+)/.exec(payload);
  return match?.[1];
}

function routeOf(request: FastifyRequest): string {
  // The pattern, never the raw URL: unmatched paths would make one series per probe of a scanner.
  return request.routeOptions.url ?? 'unmatched';
}

/**
 * Counts and times every request of `app` and serves the registry at GET /metrics. Call on the root
 * instance before registering routes (root hooks reach every plugin registered after them). Each
 * request is also logged at debug level (route, status, code, time; never bodies), with its trace id.
 */
export function instrumentHttp(app: FastifyInstance, metrics: HttpMetrics): void {
  app.addHook('onSend', async (request, _reply, payload) => {
    request.specCode = envelopeCode(payload);
    return payload;
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = routeOf(request);
    if (route === METRICS_PATH) return;
    const status = String(reply.statusCode);
    const code = request.specCode ?? 'none';
    metrics.requests.inc({ route, method: request.method, status, code });
    metrics.duration.observe({ route, method: request.method, status }, reply.elapsedTime / 1000);
    request.log.debug(
      { route, method: request.method, status: reply.statusCode, code, ms: Math.round(reply.elapsedTime) },
      'request',
    );
  });
  app.get(METRICS_PATH, async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
}
