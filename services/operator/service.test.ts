// The operator's HTTP side through inject: its metrics and the shared probes, readiness off while it
// drains.

import { describe, expect, it } from 'vitest';
import { loadCoreConfig } from '../../lib/common/config.ts';
import { drainFirst } from '../../lib/common/drain.ts';
import { createOperatorMetrics } from './metrics.ts';
import { buildOperatorService } from './service.ts';

describe('buildOperatorService', () => {
  it('serves its metrics and probes; not ready while draining, still serving', async () => {
    const metrics = createOperatorMetrics();
    metrics.leader.set(1);
    const app = buildOperatorService(loadCoreConfig({}), metrics, { logger: false });
    try {
      const scrape = await app.inject({ url: '/metrics' });
      expect(scrape.statusCode).toBe(200);
      expect(scrape.headers['content-type']).toMatch(/^text\/plain/);
      expect(scrape.body).toMatch(/^nsfwdetector_operator_leader\{service="operator"\} 1$/m);
      expect((await app.inject({ url: '/internal/ready' })).statusCode).toBe(200);
      await drainFirst(app, 0);
      expect((await app.inject({ url: '/internal/ready' })).json()).toEqual({
        code: 5001,
        message: 'Draining: shutting down',
      });
      expect((await app.inject({ url: '/internal/live' })).statusCode).toBe(200);
      expect((await app.inject({ url: '/metrics' })).headers.connection).toBe('close');
    } finally {
      await app.close();
    }
  });
});
