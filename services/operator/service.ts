// The operator's HTTP side as its process runs it (tests inject): Prometheus metrics and the probes,
// on the same root instance, logger and drain as every service. Ready unless shutting down: a standby
// replica is as ready as the leader.

import type { FastifyInstance } from 'fastify';
import type { CoreConfig } from '../../lib/common/config.ts';
import { DEFAULT_MAX_FILE_BYTES } from '../../lib/common/http-limits.ts';
import { registerProbes } from '../../lib/common/probes.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import type { OperatorMetrics } from './metrics.ts';

export function buildOperatorService(
  config: CoreConfig,
  metrics: OperatorMetrics,
  opts: { logger?: boolean } = {},
): FastifyInstance {
  // It takes no uploads: the bound only sizes the HTTP layer's guards.
  const app = createRootApp({
    config: { ...config, maxFileBytes: DEFAULT_MAX_FILE_BYTES },
    logger: opts.logger,
  });
  app.get('/metrics', async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  registerProbes(app);
  return app;
}
