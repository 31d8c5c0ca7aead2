// The health service on its own (cluster mode, behind Envoy): spec 4.3 and the skill files, from
// constants only. Listens on HEALTH_PORT (default 8083; 0 = any free port, printed in the "listening"
// line). Live and ready as soon as it listens: it depends on nothing.

import { loadConfigOrExit } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';

const config = loadConfigOrExit('nsfwdetector health');
await startTelemetry({ serviceName: 'nsfwdetector-health', sampleRatio: config.traceSampleRatio });

const { createRootApp } = await import('../common/root-app.ts');
const { ok } = await import('../common/envelope.ts');
const { createHttpMetrics, instrumentHttp } = await import('../common/metrics.ts');
const { installShutdown } = await import('../common/shutdown.ts');
const { closeConnectionsWhenDraining, drainFirst } = await import('../common/drain.ts');
const { default: healthApp } = await import('./app.ts');
const { registerOpenApi } = await import('../openapi/app.ts');
const { buildPublicDocument } = await import('../openapi/document.ts');

const app = createRootApp({ config });
instrumentHttp(app, createHttpMetrics('health'));
closeConnectionsWhenDraining(app);
// The published contract (/openapi.json, /docs/api) covers detect's routes too, served by another process.
await registerOpenApi(app, { document: await buildPublicDocument(config) });
await app.register(healthApp);
app.get('/internal/live', async () => ok({ status: 'ok' }));
app.get('/internal/ready', async () => ok({ status: 'ready' }));

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [() => drainFirst(app, config.shutdownDelayMs), () => app.close(), () => stopTelemetry()],
});

await app.listen({ port: config.healthPort, host: config.host });
app.log.info({ service: 'health', port: (app.server.address() as { port: number }).port }, 'listening');
