// Readiness of the quota service (fast, in process; the real Redis case is
// test/cluster-quota-server.test.ts): ready only while its stores answer, live regardless.

import { afterEach, describe, expect, it } from 'vitest';
import { buildQuotaService } from './app.ts';
import { loadQuotaConfig } from './config.ts';
import { MemoryQuotaStore } from './stores/memory-quota-store.ts';
import { memoryAccountStore } from './stores/sqlite-account-store.ts';

let close: (() => Promise<unknown>) | undefined;
afterEach(async () => close?.());

async function service(storesReady?: () => Promise<void>) {
  const accounts = memoryAccountStore();
  const app = await buildQuotaService({
    config: loadQuotaConfig({}),
    quotaStore: new MemoryQuotaStore(),
    accountStore: accounts,
    sessionStore: accounts,
    logger: false,
    ...(storesReady ? { storesReady } : {}),
  });
  close = () => app.close();
  return app;
}

describe('quota readiness', () => {
  it('is ready without a store check (embedded stores)', async () => {
    const app = await service();
    expect((await app.inject('/internal/ready')).statusCode).toBe(200);
  });

  it('follows the stores: 503/5001 with Retry-After while they fail, 200 once they answer', async () => {
    let down = true;
    const app = await service(async () => {
      if (down) throw new Error('Connection is closed.');
    });
    const unready = await app.inject('/internal/ready');
    expect(unready.statusCode).toBe(503);
    expect(unready.json()).toMatchObject({ code: 5001 });
    expect(unready.headers['retry-after']).toBe('1');
    expect((await app.inject('/internal/live')).statusCode).toBe(200);
    down = false;
    expect((await app.inject('/internal/ready')).json()).toMatchObject({
      code: 0,
      data: { status: 'ready' },
    });
  });
});
