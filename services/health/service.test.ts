// The health service's composition through inject: spec 4.3 and the probes, ready at once.

import { describe, expect, it } from 'vitest';
import { loadHealthConfig } from './config.ts';
import { buildHealthService } from './service.ts';

describe('buildHealthService', () => {
  it('answers spec 4.3 and is live and ready at once', async () => {
    const app = await buildHealthService(loadHealthConfig({}), { logger: false });
    try {
      expect((await app.inject({ url: '/api/public/health' })).json()).toMatchObject({
        code: 0,
        data: { status: 'ok' },
      });
      expect((await app.inject({ url: '/internal/live' })).json()).toEqual({
        code: 0,
        message: 'ok',
        data: { status: 'ok' },
      });
      expect((await app.inject({ url: '/internal/ready' })).json()).toEqual({
        code: 0,
        message: 'ok',
        data: { status: 'ready' },
      });
    } finally {
      await app.close();
    }
  });
});
