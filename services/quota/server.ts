// The quota-and-auth service on its own (cluster mode: Envoy's ext_authz sidecar). Listens on
// QUOTA_PORT (default 8081; 0 = any free port, printed in the "listening" line). Stores by
// configuration: REDIS_URL → Redis, otherwise the embedded ones (only useful for a single replica).
// Ready only while the stores answer; metrics at GET /metrics. With SOURCE_LIMIT_PORT, also its Envoy's
// rate-limit service on loopback, on a thread of its own (new connections per source: source-limit.ts). Boots, drains and stops as every
// process does (common/boot.ts).

import { runProcess } from '../../lib/common/boot.ts';
import { loadQuotaConfig } from './config.ts';

const who = 'nsfwdetector quota';
await runProcess({
  who,
  serviceName: 'nsfwdetector-quota',
  load: loadQuotaConfig,
  compose: async (config) => {
    const { buildQuotaService } = await import('./app.ts');
    const { openStoresOrExit } = await import('./stores/open-stores.ts');
    const { createHttpMetrics } = await import('../../lib/common/metrics.ts');
    const { createQuotaMetrics } = await import('./metrics.ts');
    const http = createHttpMetrics('quota');
    const quota = createQuotaMetrics(http.registry);
    const stores = await openStoresOrExit(who, config, {
      clientName: 'nsfwdetector-quota',
      onRedisError: (_err, connection) => quota.redisErrors.inc({ connection, kind: 'connection' }),
    });
    const app = await buildQuotaService({
      config,
      quotaStore: stores.quotaStore,
      accountStore: stores.accountStore,
      sessionStore: stores.sessionStore,
      keyQuota: stores.keyQuota,
      storesReady: () => stores.ping(),
      metrics: { http, quota, redis: stores.kind === 'redis' },
    });
    const sourceLimit =
      config.sourceLimitPort === 0
        ? undefined
        : await (await import('./rate-limit-worker.ts')).startRateLimitWorker({
            port: config.sourceLimitPort,
            limits: config.sourceLimits,
            ipv6PrefixLength: config.clientIpv6PrefixLength,
          });
    return {
      app,
      port: config.quotaPort,
      announce: { service: 'quota', stores: stores.kind },
      release: [() => sourceLimit?.close(), () => stores.close()],
    };
  },
});
