// The quota-and-auth service on its own (cluster mode: Envoy's ext_authz sidecar). Listens on
// QUOTA_PORT (default 8081; 0 = any free port, printed in the "listening" line). Stores by
// configuration: REDIS_URL → Redis, otherwise the embedded ones (only useful for a single replica).
// Ready only while the stores answer; metrics at GET /metrics.

import { announceListening } from '../common/announce-listening.ts';
import { loadConfigOrExit } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';

const config = loadConfigOrExit('nsfwdetector quota');
await startTelemetry({ serviceName: 'nsfwdetector-quota', sampleRatio: config.traceSampleRatio });

const { buildQuotaService } = await import('./app.ts');
const { openStores } = await import('./stores/open-stores.ts');
const { AccountsFileError } = await import('./stores/local-account-store.ts');
const { installShutdown } = await import('../common/shutdown.ts');
const { drainFirst } = await import('../common/drain.ts');
const { createHttpMetrics, createQuotaMetrics } = await import('../common/metrics.ts');

const http = createHttpMetrics('quota');
const quotaMetrics = createQuotaMetrics(http.registry);

let stores: Awaited<ReturnType<typeof openStores>>;
try {
  stores = await openStores(config, {
    clientName: 'nsfwdetector-quota',
    onRedisNotReady: (err) =>
      console.error(`nsfwdetector quota: Redis not reachable yet; answering 503 until it is (${err})`),
    onRedisError: (_err, connection) => quotaMetrics.redisErrors.inc({ connection, kind: 'connection' }),
  });
} catch (err) {
  if (err instanceof AccountsFileError) {
    console.error(`nsfwdetector quota: ${err.message}${err.cause ? ` (${err.cause})` : ''}`);
    process.exit(2);
  }
  throw err;
}

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

await app.listen({ port: config.quotaPort, host: config.host });
announceListening(app);
const { port } = app.server.address() as { port: number };
app.log.info({ service: 'quota', port, stores: stores.kind }, 'listening');
