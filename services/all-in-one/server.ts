// `npm start`: the whole service in one process. Telemetry starts before anything that loads the
// HTTP stack, which is therefore imported dynamically below.

import { ConfigError, loadConfig } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';

let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig();
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(`nsfwdetector: invalid configuration: ${err.message}`);
    process.exit(2);
  }
  throw err;
}
startTelemetry({ serviceName: 'nsfwdetector' });

const { buildEmbeddedApp } = await import('./app.ts');
const { ModelSlot } = await import('../detect/model/model-slot.ts');
const { loadClassifier } = await import('../detect/model/load.ts');
const { MemoryQuotaStore } = await import('../quota/stores/memory-quota-store.ts');
const { installShutdown } = await import('../common/shutdown.ts');

const model = new ModelSlot();
const quotaStore = new MemoryQuotaStore();
const { app, gate } = await buildEmbeddedApp({ config, model, quotaStore });

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [
    async () => gate.close(),
    () => app.close(),
    () => model.close(),
    () => quotaStore.close(),
    () => stopTelemetry(),
  ],
});

await app.listen({ port: config.port, host: config.host });
try {
  const started = performance.now();
  model.fill(await loadClassifier(config));
  app.log.info({ model: config.model, ms: Math.round(performance.now() - started) }, 'model loaded');
} catch (err) {
  app.log.fatal({ err }, 'model failed to load');
  process.exit(1);
}
