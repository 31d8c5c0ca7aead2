// The embedded composition (in-process transport) with REDIS_URL set: the stores chosen by openStores
// are the Redis ones, anonymous and account counts are shared between replicas, and a Redis outage
// answers 503/5001 quickly.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { RedisServer } from '../../test/support/redis-server.ts';
import { describeWithTool, REDIS_SERVER } from '../../test/support/tools.ts';
import { buildEmbeddedApp, type EmbeddedApp } from '../all-in-one/app.ts';
import { loadAllInOneConfig } from '../all-in-one/config.ts';
import { InProcessScorer } from '../detect/scoring/image-scorer.ts';
import { ScorerSlot } from '../detect/scoring/scorer-slot.ts';
import { openStores, type Stores } from './stores/open-stores.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));

let redis: RedisServer;
const replicas: Array<{ built: EmbeddedApp; stores: Stores }> = [];

async function replica(env: Record<string, string>) {
  const config = loadAllInOneConfig({ REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'emb:', ...env });
  const stores = await openStores(config, { required: true });
  const model = new ScorerSlot();
  model.fill(new InProcessScorer(new FakeClassifier(), config.limits));
  const built = await buildEmbeddedApp({
    config,
    model,
    quotaStore: stores.quotaStore,
    accountStore: stores.accountStore,
    sessionStore: stores.sessionStore,
    keyQuota: stores.keyQuota,
    logger: false,
  });
  await built.app.ready();
  replicas.push({ built, stores });
  return { app: built.app, stores };
}

const post = (app: EmbeddedApp['app'], url: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url, payload: JPEG, headers: { 'content-type': 'image/jpeg', ...headers } });

describeWithTool(REDIS_SERVER, 'embedded composition on Redis', () => {
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(async () => {
    for (const r of replicas) {
      await r.built.app.close();
      await r.stores.close();
    }
    await redis?.stop();
  });

  it('chooses the Redis stores and shares account and anonymous counts between replicas', async () => {
    const env = { FREE_PER_DAY: '3', FREE_PER_MINUTE: '3', ANON_PER_DAY: '2', ANON_PER_MINUTE: '2' };
    const one = await replica(env);
    const two = await replica(env);
    expect(one.stores.kind).toBe('redis');
    const account = await one.stores.accountStore.createAccount({ email: 'emb@example.com', tier: 'free' });
    const key = await one.stores.accountStore.createKey(account.id);
    const auth = { authorization: `Bearer ${key?.secret}` };
    expect((await post(one.app, '/api/open/detect', auth)).statusCode).toBe(200);
    expect((await post(two.app, '/api/open/detect', auth)).statusCode).toBe(200);
    const third = await post(one.app, '/api/open/detect', auth);
    expect(third.headers['x-ratelimit-remaining']).toBe('0');
    expect((await post(two.app, '/api/open/detect', auth)).json().code).toBe(4291);

    expect((await post(one.app, '/api/public/detect')).statusCode).toBe(200);
    expect((await post(two.app, '/api/public/detect')).statusCode).toBe(200);
    expect((await post(one.app, '/api/public/detect')).json().code).toBe(4291);

    // Revocation on one replica's store applies to the other's next request.
    await one.stores.accountStore.setTier(account.id, 'pro');
    expect((await post(two.app, '/api/open/detect', auth)).headers['x-quota-tier']).toBe('pro');
    await one.stores.accountStore.revokeKey(key?.record.id as string);
    expect((await post(two.app, '/api/open/detect', auth)).statusCode).toBe(401);
  });

  it('answers 503/5001 at once while Redis is down, and recovers by itself', async () => {
    // A command timeout as long as the test's own: an answer proves the refusal came from the closed
    // connection, not from waiting (a store that waited would fail this test by its timeout).
    const { app, stores } = await replica({ REDIS_COMMAND_TIMEOUT_MS: '60000' });
    const account = await stores.accountStore.createAccount({ email: 'down@example.com', tier: 'pro' });
    const key = await stores.accountStore.createKey(account.id);
    await redis.kill();
    for (const [url, headers] of [
      ['/api/open/detect', { authorization: `Bearer ${key?.secret}` }],
      ['/api/public/detect', {}],
    ] as const) {
      const res = await post(app, url, headers);
      expect(res.statusCode).toBe(503);
      expect(res.json().code).toBe(5001);
      expect(res.headers['retry-after']).toBe('1');
    }
    await redis.restart();
    const deadline = Date.now() + 5000;
    let status = 0;
    while (status !== 200 && Date.now() < deadline) {
      status = (await post(app, '/api/public/detect')).statusCode;
      if (status !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(200);
  });
});
