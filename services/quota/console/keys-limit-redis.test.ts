// The active-keys limit through the console route on the real Redis stores, as the cluster runs it:
// two console replicas sharing one redis-server take 100 concurrent key creations for one account,
// and exactly the limit are made (the count and the creation are one script in the account's slot).

import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decorateClientKey } from '../../../lib/common/client-key.ts';
import { installEnvelopeHandlers } from '../../../lib/common/envelope.ts';
import { RedisServer } from '../../../test/support/redis-server.ts';
import { describeWithTool, REDIS_SERVER } from '../../../test/support/tools.ts';
import { accountSubject } from '../authorize.ts';
import { RedisAccountStore } from '../stores/redis-account-store.ts';
import { connectRedis, redisReady } from '../stores/redis-connection.ts';
import { PendingCharges, RedisQuotaStore } from '../stores/redis-quota-store.ts';
import consoleApp from './app.ts';
import { readCookie, SESSION_COOKIE } from './cookies.ts';

const FAST_SCRYPT = { N: 2 ** 10, r: 8, p: 1 };
const TIERS = { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } };
const PASSWORD = 'correct horse battery';
const PREFIX = 'keys-limit:';

describeWithTool(REDIS_SERVER, 'console key limit on Redis', () => {
  let server: RedisServer;
  const apps: FastifyInstance[] = [];
  const stores: Array<{ close(): Promise<void> }> = [];

  async function replica(): Promise<{ app: FastifyInstance; accounts: RedisAccountStore }> {
    const connect = () =>
      connectRedis({
        target: server.url,
        commandTimeoutMs: 5000,
        socketTimeoutMs: 10_000,
        connectTimeoutMs: 2000,
      });
    const accountRedis = connect();
    const quotaRedis = connect();
    await Promise.all([redisReady(accountRedis, 5000), redisReady(quotaRedis, 5000)]);
    const accounts = new RedisAccountStore(accountRedis, PREFIX);
    const quotaStore = new RedisQuotaStore(quotaRedis, PREFIX, new PendingCharges());
    stores.push(accounts, quotaStore);
    const app = Fastify({ logger: false, trustProxy: true });
    decorateClientKey(app);
    installEnvelopeHandlers(app);
    await app.register(consoleApp, {
      accounts,
      sessions: accounts,
      quotaStore,
      accountLimits: TIERS,
      accountSubject,
      scrypt: FAST_SCRYPT,
      signupTotal: { perMinute: 1000, perDay: 10_000 },
    });
    await app.ready();
    apps.push(app);
    return { app, accounts };
  }

  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const s of stores) await s.close();
    await server?.stop();
  });

  it('100 concurrent creations over two replicas leave exactly 20 active keys', async () => {
    const [one, two] = [await replica(), await replica()];
    const email = 'many-keys@example.com';
    const signup = await one.app.inject({
      method: 'POST',
      url: '/console/api/signup',
      payload: { email, password: PASSWORD },
    });
    expect(signup.statusCode).toBe(202);
    const login = await two.app.inject({
      method: 'POST',
      url: '/console/api/login',
      payload: { email, password: PASSWORD },
    });
    expect(login.statusCode).toBe(200);
    const setCookie = [login.headers['set-cookie']].flat()[0] ?? '';
    const cookie = `${SESSION_COOKIE}=${readCookie(setCookie.split(';')[0], SESSION_COOKIE)}`;
    const csrf = login.json().data.csrfToken as string;

    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        (i % 2 ? one : two).app.inject({
          method: 'POST',
          url: '/console/api/keys',
          headers: { cookie, 'x-csrf-token': csrf },
          payload: { name: `k${i}` },
        }),
      ),
    );
    const counts = new Map<number, number>();
    for (const a of answers) counts.set(a.statusCode, (counts.get(a.statusCode) ?? 0) + 1);
    expect(Object.fromEntries(counts)).toEqual({ 201: 20, 400: 80 });
    expect(answers.find((a) => a.statusCode === 400)?.json()).toEqual({
      code: 4001,
      message: 'At most 20 active keys per account; revoke one first',
    });
    const account = await one.accounts.findAccountByEmail(email);
    const keys = await two.accounts.listKeys(account?.id as string);
    expect(keys.filter((k) => k.revokedAt === null)).toHaveLength(20);
  });
});
