// The quota-and-auth service on its own (cluster mode: Envoy's ext_authz sidecar). Listens on
// QUOTA_PORT (default 8081; 0 = any free port, printed in the "listening" line). Stores by
// configuration: REDIS_URL → Redis, otherwise the embedded ones (only useful for a single replica).
// Ready only while the stores answer; metrics at GET /metrics.

import { listen, startProcess } from '../../lib/common/boot.ts';
import { loadQuotaConfig } from './config.ts';

const who = 'nsfwdetector quota';
const config = await startProcess({ who, serviceName: 'nsfwdetector-quota' }, loadQuotaConfig);

const { buildQuotaService } = await import('./app.ts');
const { openStoresOrExit } = await import('./stores/open-stores.ts');
const { installShutdown } = await import('../../lib/common/shutdown.ts');
const { stopTelemetry } = await import('../../lib/common/telemetry.ts');
const { drainFirst } = await import('../../lib/common/drain.ts');
const { createHttpMetrics } = await import('../../lib/common/metrics.ts');
const { createQuotaMetrics } = await import('./metrics.ts');

const http = createHttpMetrics('quota');
const quotaMetrics = createQuotaMetrics(http.registry);
const stores = await openStoresOrExit(who, config, {
  clientName: 'nsfwdetector-quota',
  onRedisError: (_err, connection) => quotaMetrics.redisErrors.inc({ connection, kind: 'connection' }),
});

const app = await buildQuotaService({
  config,
  quotaStore: stores.quotaStore,
  accountStore: stores.accountStore,
  sessionStore: stores.sessionStore,
  keyQuota: stores.keyQuota,
  storesReady: () => stores.ping(),
  metrics: { http, quota: quotaMetrics, redis: stores.kind === 'redis' },
});

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [
    () => drainFirst(app, config.shutdownDelayMs),
    () => app.close(),
    () => stores.close(),
    () => stopTelemetry(),
  ],
});

await listen(app, { port: config.quotaPort, host: config.host }, { service: 'quota', stores: stores.kind });
