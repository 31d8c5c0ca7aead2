// The health service on its own (cluster mode, behind Envoy): spec 4.3 and the skill files, from
// constants only. Listens on HEALTH_PORT (default 8083; 0 = any free port, printed in the "listening"
// line). Live and ready as soon as it listens: it depends on nothing.

import { listen, startProcess } from '../../lib/common/boot.ts';
import { loadHealthConfig } from './config.ts';

const config = await startProcess(
  { who: 'nsfwdetector health', serviceName: 'nsfwdetector-health' },
  loadHealthConfig,
);

const { createRootApp } = await import('../../lib/common/root-app.ts');
const { ok } = await import('../../lib/common/envelope.ts');
const { createHttpMetrics, instrumentHttp } = await import('../../lib/common/metrics.ts');
const { installShutdown } = await import('../../lib/common/shutdown.ts');
const { stopTelemetry } = await import('../../lib/common/telemetry.ts');
const { closeConnectionsWhenDraining, drainFirst } = await import('../../lib/common/drain.ts');
const { default: healthApp } = await import('./app.ts');
const { registerOpenApi } = await import('../../lib/openapi/app.ts');
const { readPublicDocument } = await import('./public-document.ts');

const app = createRootApp({ config });
instrumentHttp(app, createHttpMetrics('health'));
closeConnectionsWhenDraining(app);
// The published contract (/openapi.json, /docs/api) covers detect's routes too, served by another process.
await registerOpenApi(app, { document: readPublicDocument() });
await app.register(healthApp);
app.get('/internal/live', async () => ok({ status: 'ok' }));
app.get('/internal/ready', async () => ok({ status: 'ready' }));

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [() => drainFirst(app, config.shutdownDelayMs), () => app.close(), () => stopTelemetry()],
});

await listen(app, { port: config.healthPort, host: config.host }, { service: 'health' });
