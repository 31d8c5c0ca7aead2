// The health service on its own (cluster mode, behind Envoy): spec 4.3 and the skill files, from
// constants only. Listens on HEALTH_PORT (default 8083; 0 = any free port, printed in the "listening"
// line). Boots, drains and stops as every process does (common/boot.ts).

import { runProcess } from '../../lib/common/boot.ts';
import { loadHealthConfig } from './config.ts';

await runProcess({
  who: 'nsfwdetector health',
  serviceName: 'nsfwdetector-health',
  load: loadHealthConfig,
  compose: async (config) => {
    const { buildHealthService } = await import('./service.ts');
    return {
      app: await buildHealthService(config),
      port: config.healthPort,
      announce: { service: 'health' },
    };
  },
});
