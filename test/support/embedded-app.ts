// The embedded app for inject-based tests: real plugins, in-memory quota store, a chosen classifier.

import { buildEmbeddedApp } from '../../services/all-in-one/app.ts';
import { type AllInOneConfig, loadAllInOneConfig } from '../../services/all-in-one/config.ts';
import type { Classifier } from '../../services/detect/model/classifier.ts';
import { InProcessScorer } from '../../services/detect/scoring/image-scorer.ts';
import { ScorerSlot } from '../../services/detect/scoring/scorer-slot.ts';
import { MemoryQuotaStore } from '../../services/quota/stores/memory-quota-store.ts';
import { memoryAccountStore } from '../../services/quota/stores/sqlite-account-store.ts';

/** `now` sets the quota store's clock (a test of windows must not depend on when it runs). */
export async function embeddedApp(
  opts: { env?: Record<string, string>; classifier?: Classifier; now?: () => number } = {},
) {
  // High anonymous limits unless a test asks otherwise: most tests are not about rate limits.
  const config: AllInOneConfig = loadAllInOneConfig({
    ANON_PER_MINUTE: '100000',
    ANON_PER_DAY: '100000',
    ...opts.env,
  });
  const model = new ScorerSlot();
  if (opts.classifier)
    model.fill(
      new InProcessScorer(
        opts.classifier,
        config.limits,
        undefined,
        undefined,
        undefined,
        config.hashLists.enabled,
      ),
    );
  const quotaStore = new MemoryQuotaStore(opts.now);
  const accountStore = memoryAccountStore({ touchIntervalMs: config.keyLastUsedIntervalMs });
  const built = await buildEmbeddedApp({
    config,
    model,
    quotaStore,
    accountStore,
    sessionStore: accountStore,
    logger: false,
  });
  await built.app.ready();
  return { ...built, config, model, quotaStore, accountStore };
}
