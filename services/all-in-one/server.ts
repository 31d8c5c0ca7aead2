// `npm start`: the whole service in one process. Boots, drains and stops as every process does
// (common/boot.ts). Stores by configuration: REDIS_URL → Redis; otherwise counters in memory, accounts
// in ACCOUNTS_FILE.

import { runProcess } from '../../lib/common/boot.ts';
import { loadAllInOneConfig } from './config.ts';

const who = 'nsfwdetector';
await runProcess({
  who,
  serviceName: 'nsfwdetector',
  load: loadAllInOneConfig,
  compose: async (config) => {
    const { buildEmbeddedApp } = await import('./app.ts');
    const { ScorerSlot } = await import('../detect/scoring/scorer-slot.ts');
    const { fillScorerSlot } = await import('../detect/scoring/scoring-pool.ts');
    const { openStoresOrExit } = await import('../quota/stores/open-stores.ts');
    const { waitForStores } = await import('../quota/readiness.ts');
    const slot = new ScorerSlot();
    const stores = await openStoresOrExit(who, config);
    const { app, gate, modelToLoad } = await buildEmbeddedApp({
      config,
      model: slot,
      quotaStore: stores.quotaStore,
      accountStore: stores.accountStore,
      sessionStore: stores.sessionStore,
      keyQuota: stores.keyQuota,
      storesReady: () => stores.ping(),
    });
    return {
      app,
      port: config.port,
      refuseNewWork: () => gate.close(),
      release: [() => slot.close(), () => stores.close()],
      start: async () => {
        await fillScorerSlot(slot, { ...config, model: modelToLoad }, app.log);
        await waitForStores(
          () => stores.ping(),
          (line) => console.error(`${who}: ${line}`),
        );
      },
      // The one line to wait for: printed only once detect can score (model loaded, every worker warmed
      // by one image, the quota stores answering). Health answers from the first moment;
      // /internal/ready is the readiness probe, and drops while the model or the stores cannot answer.
      // (Worded without the service's name or routes: test/server-process.test.ts checks that nothing
      // about requests reaches the output, by looking for "detect".)
      readyLine: (url) => `ready — ${url} is scoring images (model ${modelToLoad} loaded, workers warm)`,
    };
  },
});
