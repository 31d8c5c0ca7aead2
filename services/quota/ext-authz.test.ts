// The ext_authz HTTP transport, called the way Envoy calls it: the original method, path_prefix +
// original path, the selected headers, no body.

import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { buildQuotaService } from './app.ts';
import { loadQuotaConfig } from './config.ts';
import {
  CLIENT_HEADERS_ON_DENY,
  CLIENT_HEADERS_ON_SUCCESS,
  REFUND_PATH_PREFIX,
  UPSTREAM_HEADERS,
} from './ext-authz.ts';
import { MemoryQuotaStore } from './stores/memory-quota-store.ts';
import { memoryAccountStore, type SqliteAccountStore } from './stores/sqlite-account-store.ts';

let app: FastifyInstance | undefined;
let accounts: SqliteAccountStore;
let quota: MemoryQuotaStore;
// The quota clock: 2031-03-14T10:00:30Z, half way through a minute, 50 370 s before UTC midnight.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);

async function start(env: Record<string, string> = {}) {
  const config = loadQuotaConfig({ ANON_PER_MINUTE: '1000', ANON_PER_DAY: '1000', ...env });
  accounts = memoryAccountStore();
  quota = new MemoryQuotaStore(() => T0);
  app = await buildQuotaService({
    config,
    quotaStore: quota,
    accountStore: accounts,
    sessionStore: accounts,
    logger: false,
  });
  await app.ready();
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function keyFor(tier: 'free' | 'pro' = 'free') {
  const account = await accounts.createAccount({ email: `${tier}${Math.random()}@example.com`, tier });
  const key = await accounts.createKey(account.id);
  return { account, secret: key?.secret as string };
}

/** As Envoy sends it: method and path of the original request, selected headers, empty body. */
function check(
  a: FastifyInstance,
  path: string,
  headers: Record<string, string> = {},
  method: 'POST' | 'GET' = 'POST',
  remoteAddress = '10.1.0.7',
) {
  return a.inject({
    method,
    url: `/ext_authz${path}`,
    headers: { 'content-length': '0', ...headers },
    remoteAddress,
  });
}

const pick = (headers: Record<string, unknown>, names: readonly string[]) =>
  Object.fromEntries(names.filter((n) => headers[n] !== undefined).map((n) => [n, headers[n]]));

describe('ext_authz check', () => {
  it('allows a valid key: 200, account id and tier for the upstream, quota headers for the client', async () => {
    const a = await start();
    const { account, secret } = await keyFor('pro');
    const res = await check(a, '/api/open/detect', { authorization: `Bearer ${secret}` });
    expect(res.statusCode).toBe(200);
    expect(pick(res.headers, UPSTREAM_HEADERS)).toEqual({
      'x-account-id': account.id,
      'x-quota-tier': 'pro',
      'x-charge-id': expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(pick(res.headers, CLIENT_HEADERS_ON_SUCCESS)).toEqual({
      'x-ratelimit-limit': '10000',
      'x-ratelimit-remaining': '9999',
      'x-ratelimit-reset': '1931299200', // 2031-03-15T00:00:00Z
      'x-quota-tier': 'pro',
    });
  });

  it('takes a charge back when the edge posts its id (the upstream answered 503), once', async () => {
    const a = await start();
    const { secret } = await keyFor('pro');
    const auth = { authorization: `Bearer ${secret}` };
    const first = await check(a, '/api/open/detect', auth);
    expect(first.headers['x-ratelimit-remaining']).toBe('9999');
    const chargeId = String(first.headers['x-charge-id']);
    for (let i = 0; i < 2; i++) {
      const refund = await a.inject({ method: 'POST', url: `${REFUND_PATH_PREFIX}/${chargeId}` });
      expect(refund.statusCode).toBe(204);
    }
    // Refunded once, not twice: the next request is the first one counted again.
    expect((await check(a, '/api/open/detect', auth)).headers['x-ratelimit-remaining']).toBe('9999');
    expect((await check(a, '/api/open/detect', auth)).headers['x-ratelimit-remaining']).toBe('9998');
    const bad = await a.inject({ method: 'POST', url: `${REFUND_PATH_PREFIX}/${'x'.repeat(65)}` });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ code: 4001 });
  });

  it('answers 503 when the store cannot take the charge back, so that the edge asks again', async () => {
    const a = await start();
    const { secret } = await keyFor('pro');
    const auth = { authorization: `Bearer ${secret}` };
    const chargeId = String((await check(a, '/api/open/detect', auth)).headers['x-charge-id']);
    const refund = quota.refund.bind(quota);
    quota.refund = async () => {
      throw new Error('store down');
    };
    const failed = await a.inject({ method: 'POST', url: `${REFUND_PATH_PREFIX}/${chargeId}` });
    expect(failed.statusCode).toBe(503);
    expect(failed.json()).toMatchObject({ code: 5001 });
    quota.refund = refund;
    const again = await a.inject({ method: 'POST', url: `${REFUND_PATH_PREFIX}/${chargeId}` });
    expect(again.statusCode).toBe(204);
    expect((await check(a, '/api/open/detect', auth)).headers['x-ratelimit-remaining']).toBe('9999');
  });

  it('ignores a body and its Content-Type, and the query string', async () => {
    const a = await start();
    const { secret } = await keyFor();
    const res = await a.inject({
      method: 'POST',
      url: '/ext_authz/api/open/detect?x=1',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'image/jpeg' },
      payload: Buffer.alloc(1000, 1),
    });
    expect(res.statusCode).toBe(200);
  });

  it('denies a bad key with 401, the envelope body and no quota headers', async () => {
    const a = await start();
    const res = await check(a, '/api/open/detect', { authorization: 'Bearer nope' });
    expect(res.statusCode).toBe(401);
    expect(res.json()).toEqual({ code: 4011, message: expect.any(String) });
    expect(res.headers['content-type']).toMatch(/application\/json/);
    expect(res.headers['x-account-id']).toBeUndefined();
    const missing = await check(a, '/api/open/detect');
    expect(missing.statusCode).toBe(401);
  });

  it('denies past the limit with 429, the envelope, Retry-After and X-RateLimit-*', async () => {
    const a = await start({ FREE_PER_DAY: '2', FREE_PER_MINUTE: '2' });
    const { secret } = await keyFor();
    const auth = { authorization: `Bearer ${secret}` };
    expect((await check(a, '/api/open/detect', auth)).statusCode).toBe(200);
    expect((await check(a, '/api/open/detect', auth)).statusCode).toBe(200);
    const res = await check(a, '/api/open/detect', auth);
    expect(res.statusCode).toBe(429);
    expect(res.json()).toEqual({ code: 4291, message: expect.any(String) });
    const sent = pick(res.headers, CLIENT_HEADERS_ON_DENY);
    expect(sent).toMatchObject({
      'x-ratelimit-limit': '2',
      'x-ratelimit-remaining': '0',
      'x-quota-tier': 'free',
    });
    expect(sent['retry-after']).toBe('50370');
    expect(sent['x-ratelimit-reset']).toBe('1931299200'); // 2031-03-15T00:00:00Z
  });

  it('counts anonymous calls per client IP: the socket, or the X-Forwarded-For entry of the trusted hop', async () => {
    const direct = await start({ ANON_PER_MINUTE: '1' });
    expect((await check(direct, '/api/public/detect', {}, 'POST', '10.0.0.1')).statusCode).toBe(200);
    const again = await check(direct, '/api/public/detect', {}, 'POST', '10.0.0.1');
    expect(again.statusCode).toBe(429);
    expect(again.json().code).toBe(4290);
    expect((await check(direct, '/api/public/detect', {}, 'POST', '10.0.0.2')).statusCode).toBe(200);
    await direct.close();

    // Behind Envoy (TRUSTED_PROXY_HOPS=1): every check comes from Envoy's address; Envoy appended the
    // client's address to X-Forwarded-For, and anything before it was sent by the client.
    const edge = await start({ ANON_PER_MINUTE: '1', TRUSTED_PROXY_HOPS: '1' });
    const via = (xff: string) =>
      check(edge, '/api/public/detect', { 'x-forwarded-for': xff }, 'POST', '127.0.0.1');
    const ok = await via('203.0.113.9');
    expect(ok.statusCode).toBe(200);
    expect(ok.headers['x-account-id']).toBe('-');
    expect(ok.headers['x-quota-tier']).toBe('anonymous');
    expect((await via('1.2.3.4, 203.0.113.9')).statusCode).toBe(429);
    expect((await via('203.0.113.9, 198.51.100.1')).statusCode).toBe(200);
  });

  it('behind Envoy counts an IPv6 client by its /64 (CLIENT_IPV6_PREFIX_LENGTH), an IPv4-mapped one as IPv4', async () => {
    const edge = await start({ ANON_PER_MINUTE: '2', TRUSTED_PROXY_HOPS: '1' });
    const via = (xff: string) =>
      check(edge, '/api/public/detect', { 'x-forwarded-for': xff }, 'POST', '127.0.0.1');
    expect((await via('2001:db8:1:2::1')).statusCode).toBe(200);
    expect((await via('2001:db8:1:2:ffff::9')).statusCode).toBe(200);
    expect((await via('2001:db8:1:2::3')).statusCode).toBe(429);
    expect((await via('2001:db8:1:3::1')).statusCode).toBe(200);
    expect((await via('203.0.113.5')).statusCode).toBe(200);
    expect((await via('::ffff:203.0.113.5')).statusCode).toBe(200);
    expect((await via('203.0.113.5')).statusCode).toBe(429);
    await edge.close();

    const per56 = await start({
      ANON_PER_MINUTE: '1',
      TRUSTED_PROXY_HOPS: '1',
      CLIENT_IPV6_PREFIX_LENGTH: '56',
    });
    const via56 = (xff: string) =>
      check(per56, '/api/public/detect', { 'x-forwarded-for': xff }, 'POST', '127.0.0.1');
    expect((await via56('2001:db8:1:200::1')).statusCode).toBe(200);
    expect((await via56('2001:db8:1:2ff::1')).statusCode).toBe(429);
    expect((await via56('2001:db8:1:300::1')).statusCode).toBe(200);
    await per56.close();
    expect(() => loadQuotaConfig({ CLIENT_IPV6_PREFIX_LENGTH: '16' })).toThrow(/CLIENT_IPV6_PREFIX_LENGTH/);
  });

  it('tracks a valid X-Device-Id', async () => {
    const a = await start();
    const id = '3f1c2a4e-9b7d-4c1e-8a2b-5d6e7f8a9b0c';
    await check(a, '/api/public/detect', { 'x-device-id': id });
    expect(quota.deviceCount(id)).toBe(1);
  });

  it('lets other methods and paths through without counting anything', async () => {
    const a = await start({ ANON_PER_MINUTE: '1' });
    for (const path of ['/api/public/health', '/docs/skill.md', '/console/api/keys', '']) {
      const res = await check(a, path);
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-limit']).toBeUndefined();
    }
    expect((await check(a, '/api/open/detect', {}, 'GET')).statusCode).toBe(200);
    expect((await check(a, '/api/public/detect', {}, 'GET')).statusCode).toBe(200);
    expect((await check(a, '/api/public/detect')).statusCode).toBe(200);
    expect((await check(a, '/api/public/detect')).statusCode).toBe(429);
  });

  it('answers 503/5001 with Retry-After when the store fails', async () => {
    const a = await start();
    const { secret } = await keyFor();
    quota.consume = async () => {
      throw new Error('redis gone');
    };
    const res = await check(a, '/api/open/detect', { authorization: `Bearer ${secret}` });
    expect(res.statusCode).toBe(503);
    expect(res.json().code).toBe(5001);
    expect(res.headers['retry-after']).toBe('1');
  });

  it('has probes, and serves the console beside the check endpoint', async () => {
    const a = await start();
    expect((await a.inject({ url: '/internal/live' })).statusCode).toBe(200);
    expect((await a.inject({ url: '/internal/ready' })).statusCode).toBe(200);
    expect((await a.inject({ url: '/console/' })).statusCode).toBe(200);
    expect((await a.inject({ url: '/console/api/session' })).statusCode).toBe(401);
  });
});
