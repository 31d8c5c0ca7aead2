// The health service on its own (cluster mode, behind Envoy): spec 4.3 and the skill files, from
// constants only. Listens on HEALTH_PORT (default 8083; 0 = any free port, printed in the "listening"
// line). Live and ready as soon as it listens: it depends on nothing.

import { ConfigError, loadConfig } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';

let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig();
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(`nsfwdetector health: invalid configuration: ${err.message}`);
    process.exit(2);
  }
  throw err;
}
await startTelemetry({ serviceName: 'nsfwdetector-health' });

const { createRootApp } = await import('../common/root-app.ts');
const { ok } = await import('../common/envelope.ts');
const { createHttpMetrics, instrumentHttp } = await import('../common/metrics.ts');
const { installShutdown } = await import('../common/shutdown.ts');
const { closeConnectionsWhenDraining } = await import('../common/drain.ts');
const { default: healthApp } = await import('./app.ts');

const app = createRootApp({ config });
instrumentHttp(app, createHttpMetrics('health'));
closeConnectionsWhenDraining(app);
await app.register(healthApp);
app.get('/internal/live', async () => ok({ status: 'ok' }));
app.get('/internal/ready', async () => ok({ status: 'ready' }));

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [() => app.close(), () => stopTelemetry()],
});

await app.listen({ port: config.healthPort, host: config.host });
app.log.info({ service: 'health', port: (app.server.address() as { port: number }).port }, 'listening');
