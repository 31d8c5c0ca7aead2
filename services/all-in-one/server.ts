// `npm start`: the whole service in one process. Telemetry starts before anything that loads the
// HTTP stack, which is therefore imported dynamically below.

import { announceListening } from '../common/announce-listening.ts';
import { loadOrExit } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';
import { loadAllInOneConfig } from './config.ts';

const config = loadOrExit('nsfwdetector', loadAllInOneConfig);
await startTelemetry({ serviceName: 'nsfwdetector', sampleRatio: config.traceSampleRatio });

const { buildEmbeddedApp } = await import('./app.ts');
const { ModelSlot } = await import('../detect/model/model-slot.ts');
const { jpegDecoderInUse, loadScorer } = await import('../detect/model/load.ts');
const { openStores } = await import('../quota/stores/open-stores.ts');
const { AccountsFileError } = await import('../quota/stores/local-account-store.ts');
const { installShutdown } = await import('../common/shutdown.ts');

const model = new ModelSlot();
// Stores by configuration: REDIS_URL → Redis; otherwise counters in memory, accounts in ACCOUNTS_FILE.
let stores: Awaited<ReturnType<typeof openStores>>;
try {
  stores = await openStores(config, {
    onRedisNotReady: (err) =>
      console.error(`nsfwdetector: Redis not reachable yet; quota checks answer 503 until it is (${err})`),
  });
} catch (err) {
  if (err instanceof AccountsFileError) {
    console.error(`nsfwdetector: ${err.message}${err.cause ? ` (${err.cause})` : ''}`);
    process.exit(2);
  }
  throw err;
}
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

await app.listen({ port: config.port, host: config.host });
announceListening(app);
try {
  const started = performance.now();
  model.fill(await loadScorer(config, (err) => app.log.error({ err }, 'scoring worker replaced')));
  const { jpegDecoder, why } = jpegDecoderInUse(config);
  if (why) app.log.warn(why);
  app.log.info(
    { model: config.model, jpegDecoder, ms: Math.round(performance.now() - started) },
    'model loaded',
  );
} catch (err) {
  app.log.fatal({ err }, 'model failed to load');
  process.exit(1);
}
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
