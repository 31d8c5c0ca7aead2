// `npm start`: the whole service in one process. Telemetry starts before anything that loads the
// HTTP stack, which is therefore imported dynamically below.

import { listen, startProcess } from '../../lib/common/boot.ts';
import { loadAllInOneConfig } from './config.ts';

const who = 'nsfwdetector';
const config = await startProcess({ who, serviceName: 'nsfwdetector' }, loadAllInOneConfig);

const { buildEmbeddedApp } = await import('./app.ts');
const { ScorerSlot } = await import('../detect/scoring/scorer-slot.ts');
const { fillScorerSlot } = await import('../detect/scoring/scoring-pool.ts');
const { openStoresOrExit } = await import('../quota/stores/open-stores.ts');
const { installShutdown } = await import('../../lib/common/shutdown.ts');
const { stopTelemetry } = await import('../../lib/common/telemetry.ts');

const model = new ScorerSlot();
// Stores by configuration: REDIS_URL → Redis; otherwise counters in memory, accounts in ACCOUNTS_FILE.
const stores = await openStoresOrExit(who, config);
const { quotaStore, accountStore, sessionStore, keyQuota } = stores;
const { app, gate } = await buildEmbeddedApp({
  config,
  model,
  quotaStore,
  accountStore,
  sessionStore,
  keyQuota,
});

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  steps: [
    async () => gate.close(),
    () => app.close(),
    () => model.close(),
    () => stores.close(),
    () => stopTelemetry(),
  ],
});

await listen(app, { port: config.port, host: config.host });
await fillScorerSlot(model, config, app.log);
// The one line to wait for: printed only now that detect can score (model loaded, every worker warmed
// by one image). Health answers from the first moment; /internal/ready is the readiness probe.
// (Worded without the service's name or routes: test/server-process.test.ts checks that nothing about
// requests reaches the output, by looking for "detect".)
console.log(
  `ready — ${publicUrl(app.server.address())} is scoring images (model ${config.model} loaded, workers warm)`,
);

function publicUrl(address: ReturnType<typeof app.server.address>): string {
  if (address === null || typeof address === 'string') return String(address);
  const wildcard = address.address === '0.0.0.0' || address.address === '::';
  const host = wildcard ? 'localhost' : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}
