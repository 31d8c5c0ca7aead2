// The edge's identity headers on detect routes (fast, in process; the real server is
// test/cluster-detect-server.test.ts).

import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { ok } from '../common/envelope.ts';
import { createRootApp } from '../common/root-app.ts';
import { loadDetectConfig } from './config.ts';
import { EdgeAuthorizer, requireEdgeIdentity } from './edge-identity.ts';

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
    const decision = await new EdgeAuthorizer().authorize();
    expect(decision).toMatchObject({ allowed: true, headers: {} });
  });
});
