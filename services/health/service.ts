// The health service's root instance as its server runs it (tests inject): spec 4.3 and the skill
// files, the published contract, metrics, and probes that depend on nothing.

import type { FastifyInstance } from 'fastify';
import { createHttpMetrics, instrumentHttp } from '../../lib/common/metrics.ts';
import { registerProbes } from '../../lib/common/probes.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import { registerOpenApi } from '../../lib/openapi/app.ts';
import healthApp from './app.ts';
import type { HealthConfig } from './config.ts';
import { readPublicDocument } from './public-document.ts';

export async function buildHealthService(
  config: HealthConfig,
  opts: { logger?: boolean } = {},
): Promise<FastifyInstance> {
  const app = createRootApp({ config, logger: opts.logger });
  instrumentHttp(app, createHttpMetrics('health'));
  // The published contract (/openapi.json, /docs/api) covers detect's routes too, served by another process.
  await registerOpenApi(app, { document: readPublicDocument() });
  await app.register(healthApp);
  // Live and ready as soon as it listens: it depends on nothing.
  registerProbes(app);
  return app;
}
