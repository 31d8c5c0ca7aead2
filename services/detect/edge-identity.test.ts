// The edge's identity headers on detect routes, and the clients detect bounds behind the edge (fast,
// in process; the real server is test/cluster-detect-server.test.ts, the real Envoy
// test/e2e/fairness.test.ts).

import { readFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { RequestFacts } from '../../lib/common/authorizer.ts';
import { ok } from '../../lib/common/envelope.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import { fixture } from '../../test/fixtures/corpus.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import detectApp from './app.ts';
import { loadDetectConfig } from './config.ts';
import { EdgeAuthorizer, requireEdgeIdentity } from './edge-identity.ts';
import { intakeLimitsFrom } from './intake.ts';
import { InProcessScorer } from './scoring/image-scorer.ts';
import { ScorerSlot } from './scoring/scorer-slot.ts';
import { WorkGate } from './work-gate.ts';

const SECRET = '0123456789abcdef0123';
let app: FastifyInstance | undefined;
afterEach(async () => app?.close());

async function edgeApp(secret: string | undefined) {
  app = createRootApp({ config: loadDetectConfig({}), logger: false });
  requireEdgeIdentity(app, { secret });
  app.post('/api/open/detect', async (request) => ok(request.edgeIdentity));
  app.get('/internal/ready', async () => ok({}));
  return app;
}

const detect = (a: FastifyInstance, headers: Record<string, string>) =>
  a.inject({ method: 'POST', url: '/api/open/detect', headers });

describe('requireEdgeIdentity', () => {
  it('passes the account and tier Envoy set on to the route', async () => {
    const a = await edgeApp(undefined);
    const res = await detect(a, { 'x-account-id': 'acc_0123456789abcdef', 'x-quota-tier': 'pro' });
    expect(res.json()).toEqual({
      code: 0,
      message: 'ok',
      data: { accountId: 'acc_0123456789abcdef', tier: 'pro' },
    });
  });

  it('refuses 401/4011 without both headers or with an unknown tier', async () => {
    const a = await edgeApp(undefined);
    const cases: Array<Record<string, string>> = [
      {},
      { 'x-account-id': '-' },
      { 'x-quota-tier': 'free' },
      { 'x-account-id': '-', 'x-quota-tier': 'gold' },
    ];
    for (const headers of cases) {
      const res = await detect(a, headers);
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
      expect(res.json().code).toBe(4011);
    }
  });

  it('with a secret, requires x-edge-secret equal to it', async () => {
    const a = await edgeApp(SECRET);
    const identity = { 'x-account-id': '-', 'x-quota-tier': 'anonymous' };
    expect((await detect(a, identity)).statusCode).toBe(401);
    expect((await detect(a, { ...identity, 'x-edge-secret': `${SECRET}0` })).statusCode).toBe(401);
    expect((await detect(a, { ...identity, 'x-edge-secret': SECRET })).statusCode).toBe(200);
  });

  it('leaves other routes alone', async () => {
    const a = await edgeApp(SECRET);
    expect((await a.inject('/internal/ready')).statusCode).toBe(200);
  });

  it("admits without headers of its own (the client gets the quota service's through Envoy)", async () => {
    const decision = await new EdgeAuthorizer().authorize(
      facts('public', { accountId: '-', tier: 'anonymous' }),
    );
    expect(decision).toMatchObject({ allowed: true, headers: {} });
  });
});

function facts(
  endpoint: RequestFacts['endpoint'],
  edgeIdentity?: RequestFacts['edgeIdentity'],
): RequestFacts {
  return { endpoint, clientIp: '203.0.113.9', edgeIdentity };
}

describe('EdgeAuthorizer', () => {
  it('hands on the account the edge named on the key endpoint, and none for anonymous requests', async () => {
    const authorizer = new EdgeAuthorizer();
    const keyed = await authorizer.authorize(facts('open', { accountId: 'acc_1', tier: 'pro' }));
    expect(keyed).toMatchObject({ allowed: true, tier: 'pro', accountId: 'acc_1' });
    const anonymous = await authorizer.authorize(facts('public', { accountId: '-', tier: 'anonymous' }));
    expect(anonymous).toMatchObject({ allowed: true, tier: 'anonymous' });
    expect(anonymous).not.toHaveProperty('accountId');
    expect(await authorizer.check(facts('open', { accountId: 'acc_1', tier: 'free' }))).toMatchObject({
      allowed: true,
      accountId: 'acc_1',
    });
  });

  it('refuses 4011 what did not come through ext_authz: no identity, or an anonymous one on the key endpoint', async () => {
    const authorizer = new EdgeAuthorizer();
    for (const decision of [
      await authorizer.authorize(facts('public')),
      await authorizer.authorize(facts('open', { accountId: '-', tier: 'anonymous' })),
    ]) {
      expect(decision.allowed).toBe(false);
      if (!decision.allowed) expect(decision.error.code).toBe(4011);
    }
  });
});

// Detect composed as server.ts composes it behind Envoy (TRUSTED_PROXY_HOPS=1: Envoy appends the peer).
describe('uploads in progress per client behind the edge', () => {
  const JPEG = readFileSync(fixture('320x240.jpg'));
  const ENVOY = '10.9.9.9';

  async function clusterDetect() {
    const config = loadDetectConfig({ TRUSTED_PROXY_HOPS: '1', MAX_UPLOADS_PER_CLIENT: '1' });
    const model = new ScorerSlot();
    model.fill(new InProcessScorer(new FakeClassifier(), config.limits));
    const gate = new WorkGate(config.concurrency);
    app = createRootApp({ config, logger: false });
    requireEdgeIdentity(app, { secret: undefined });
    await app.register(detectApp, {
      model,
      authorizer: new EdgeAuthorizer(),
      gate,
      thresholds: config.thresholds,
      intake: intakeLimitsFrom(config),
      limits: config.limits,
    });
    await app.ready();
    return { app, gate };
  }

  const send = (
    a: FastifyInstance,
    url: string,
    headers: Record<string, string>,
    payload: Buffer | PassThrough,
  ) =>
    a.inject({
      method: 'POST',
      url,
      payload,
      headers: { 'content-type': 'image/jpeg', ...headers },
      remoteAddress: ENVOY,
    });

  function stalledBody(): PassThrough {
    const body = new PassThrough();
    body.write(JPEG.subarray(0, 100));
    return body;
  }

  async function until(condition: () => boolean): Promise<void> {
    while (!condition()) await new Promise((r) => setTimeout(r, 5));
  }

  it('bounds the key endpoint by the account the edge names, whatever address it comes from', async () => {
    const { app: a, gate } = await clusterDetect();
    const as = (account: string, forwardedFor: string) => ({
      'x-account-id': account,
      'x-quota-tier': 'pro',
      'x-forwarded-for': forwardedFor,
    });
    const body = stalledBody();
    const slow = send(a, '/api/open/detect', as('acc_a', '203.0.113.1'), body);
    await until(() => gate.admitted === 1);
    const refused = await send(a, '/api/open/detect', as('acc_a', '203.0.113.2'), JPEG);
    expect({ status: refused.statusCode, code: refused.json().code }).toEqual({ status: 503, code: 5001 });
    expect(refused.headers['retry-after']).toMatch(/^\d+$/);
    // Another account from the very same address is served.
    expect((await send(a, '/api/open/detect', as('acc_b', '203.0.113.1'), JPEG)).statusCode).toBe(200);
    body.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
    expect((await send(a, '/api/open/detect', as('acc_a', '203.0.113.2'), JPEG)).statusCode).toBe(200);
  });

  it('bounds the anonymous endpoint by the address the edge appended; entries a client wrote count for nothing', async () => {
    const { app: a, gate } = await clusterDetect();
    const anonymous = (forwardedFor: string) => ({
      'x-account-id': '-',
      'x-quota-tier': 'anonymous',
      'x-forwarded-for': forwardedFor,
    });
    const body = stalledBody();
    const slow = send(a, '/api/public/detect', anonymous('198.51.100.1, 203.0.113.1'), body);
    await until(() => gate.admitted === 1);
    // The same client posing as another (its own entry in front of the edge's) is still itself.
    const refused = await send(a, '/api/public/detect', anonymous('198.51.100.2, 203.0.113.1'), JPEG);
    expect({ status: refused.statusCode, code: refused.json().code }).toEqual({ status: 503, code: 5001 });
    // Another client naming the first one in its own entry is served as itself.
    expect(
      (await send(a, '/api/public/detect', anonymous('203.0.113.1, 203.0.113.2'), JPEG)).statusCode,
    ).toBe(200);
    body.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
  });
});
