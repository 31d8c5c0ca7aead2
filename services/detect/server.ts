// The detect service on its own (cluster mode, behind Envoy). Listens on DETECT_PORT (default 8082;
// 0 = any free port, printed in the "listening" line). Admission is Envoy's ext_authz call to the
// quota service: detect trusts the identity headers Envoy adds (edge-identity.ts) and counts nothing.
// Ready (/internal/ready) once the model is loaded and every scoring worker has scored a warm-up image.
// Boots, drains and stops as every process does (common/boot.ts).

import { runProcess } from '../../lib/common/boot.ts';
import { loadDetectConfig } from './config.ts';

await runProcess({
  who: 'nsfwdetector detect',
  serviceName: 'nsfwdetector-detect',
  load: loadDetectConfig,
  compose: async (config) => {
    const { buildDetectService } = await import('./service.ts');
    const { ScorerSlot } = await import('./scoring/scorer-slot.ts');
    const { fillScorerSlot } = await import('./scoring/scoring-pool.ts');
    const slot = new ScorerSlot();
    const { app, gate, modelToLoad: model, meter } = await buildDetectService(config, slot);
    return {
      app,
      port: config.detectPort,
      announce: { service: 'detect' },
      // New detect requests get 503/5001 from the gate; in-flight ones finish.
      refuseNewWork: () => gate.close(),
      release: [() => slot.close()],
      start: () => fillScorerSlot(slot, { ...config, model }, app.log, meter),
    };
  },
});
