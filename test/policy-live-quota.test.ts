// The quota server applies the policy file's limits live: a real redis-server and the quota service's
// thin server as a process with POLICY_FILE, the file swapped as the kubelet swaps a ConfigMap volume.
// Each phase asks Envoy's ext_authz question as a fresh client (X-Forwarded-For, one trusted hop), so
// that phases do not share a window; every answer is held to the fixed minute window of the limit in
// force, in whichever minute it was counted (support/window-log.ts), so no phase waits for the
// clock. The server's "policy applied" log line says when a swap was read: waiting on it costs no quota.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { RedisAccountStore } from '../services/quota/stores/redis-account-store.ts';
import { connectRedis, redisReady } from '../services/quota/stores/redis-connection.ts';
import { applied, type PolicyMount, policyMount, policyText } from './support/policy-mount.ts';
import { RedisServer } from './support/redis-server.ts';
import { type ServerProcess, startClusterService, waitForStatus } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';
import { WindowLog } from './support/window-log.ts';

const PREFIX = 'pl:';

describeWithTool(REDIS_SERVER, 'the quota server applies the policy file live (Redis)', () => {
  let redis: RedisServer;
  let mount: PolicyMount;
  let quota: ServerProcess;
  let accounts: RedisAccountStore;

  beforeAll(async () => {
    redis = await RedisServer.start();
    mount = policyMount(
      policyText({
        generation: 1,
        anonymous: { perMinute: 2, perDay: 100 },
        tiers: { free: { perMinute: 1, perDay: 40 } },
      }),
    );
    quota = await startClusterService('quota', {
      env: {
        REDIS_URL: redis.url,
        REDIS_KEY_PREFIX: PREFIX,
        POLICY_FILE: mount.file,
        TRUSTED_PROXY_HOPS: '1',
        // The configuration's limits, which the policy replaces.
        ANON_PER_MINUTE: '50',
        ANON_PER_DAY: '500',
        FREE_PER_MINUTE: '50',
        FREE_PER_DAY: '500',
      },
    });
    await waitForStatus(quota, '/internal/ready', 200);
    const connection = connectRedis({
      target: redis.url,
      commandTimeoutMs: 5_000,
      socketTimeoutMs: 10_000,
      connectTimeoutMs: 5_000,
      name: 'policy-live-test',
    });
    await redisReady(connection, 5_000);
    accounts = new RedisAccountStore(connection, PREFIX);
  }, 180_000);

  afterAll(async () => {
    await accounts?.close();
    await quota?.stop();
    await redis?.stop();
    mount?.remove();
  });

  let clients = 0;
  /** A client address never used before in this file. */
  const freshClient = () => `198.51.100.${++clients}`;
  const check = async (client: string, authorization?: string) => {
    const endpoint = authorization ? 'open' : 'public';
    const res = await fetch(`${quota.url}/ext_authz/api/${endpoint}/detect`, {
      method: 'POST',
      headers: { 'x-forwarded-for': client, ...(authorization ? { authorization } : {}) },
    });
    const body = res.status === 200 ? undefined : ((await res.json()) as { code: number });
    return { status: res.status, code: body?.code, limit: res.headers.get('x-ratelimit-limit') };
  };
  /** Each subject's calls: a client's address, or the account behind a key. */
  const logs = new Map<string, WindowLog>();
  /** One check, held to the fixed minute window of `perMinute`; X-RateLimit-Limit on every answer. */
  const checkHeld = async (client: string, perMinute: number, dayLimit: number, auth?: string) => {
    const subject = auth ?? client;
    const log = logs.get(subject) ?? new WindowLog();
    logs.set(subject, log);
    const answer = await log.call(
      () => check(client, auth),
      (a) => (a.status === 200 ? 'served' : 'refused'),
    );
    expect(log.allowed(perMinute), `check ${log.count('served') + log.count('refused')}`).toContain(
      log.last(),
    );
    const limit = String(dayLimit);
    expect(answer).toEqual(
      log.last() === 'served' ? { status: 200, code: undefined, limit } : { status: 429, code: 4290, limit },
    );
    return log.last();
  };
  /** Checks until one is refused (429/4290): within a minute, the first `perMinute` are served. */
  const expectMinuteLimit = async (client: string, perMinute: number, dayLimit: number, auth?: string) => {
    for (let i = 0; i <= 2 * perMinute + 1; i++)
      if ((await checkHeld(client, perMinute, dayLimit, auth)) === 'refused') return;
    throw new Error(`never refused under a limit of ${perMinute} a minute`);
  };
  const swap = async (generation: number, text: string) => {
    mount.write(text);
    await expect
      .poll(() => applied(quota.logLines, generation), { timeout: 30_000, interval: 50 })
      .toBe(true);
  };

  it("applies the policy's anonymous limits from the start, not the configuration's", async () => {
    expect(applied(quota.logLines, 1)).toBe(true);
    await expectMinuteLimit(freshClient(), 2, 100);
  });

  it('follows a swap of the file on the next decision: N → M → lower, X-RateLimit-Limit with it', async () => {
    const client = freshClient();
    await expectMinuteLimit(client, 2, 100);
    await swap(2, policyText({ generation: 2, anonymous: { perMinute: 4, perDay: 200 } }));
    // The same client: in the same minute, two more under the new limit, then refused.
    await expectMinuteLimit(client, 4, 200);
    // A new client gets exactly the new limit.
    const other = freshClient();
    await expectMinuteLimit(other, 4, 200);
    // Lowered below what this client used: in the same minute, refused at once.
    await swap(3, policyText({ generation: 3, anonymous: { perMinute: 1, perDay: 150 } }));
    await checkHeld(other, 1, 150);
    await expectMinuteLimit(freshClient(), 1, 150);
  });

  it("applies the policy's tier limits to API keys, live", async () => {
    const account = await accounts.createAccount({ email: 'policy-live@example.com', tier: 'free' });
    const key = await accounts.createKey(account.id);
    if (!key) throw new Error('key not created');
    const bearer = `Bearer ${key.secret}`;
    await swap(
      4,
      policyText({
        generation: 4,
        tiers: { free: { perMinute: 1, perDay: 40 }, pro: { perMinute: 3, perDay: 70 } },
      }),
    );
    await expectMinuteLimit(freshClient(), 1, 40, bearer);
    // Quota is per account: another client with the same key continues the account's minute.
    await swap(
      5,
      policyText({
        generation: 5,
        tiers: { free: { perMinute: 2, perDay: 45 }, pro: { perMinute: 3, perDay: 70 } },
      }),
    );
    await expectMinuteLimit(freshClient(), 2, 45, bearer);
    // The pro tier's limits of the same policy, once the account is pro.
    await accounts.setTier(account.id, 'pro');
    await expectMinuteLimit(freshClient(), 3, 70, bearer);
  });

  it('keeps the last good policy when the file turns invalid', async () => {
    await swap(6, policyText({ generation: 6, anonymous: { perMinute: 3, perDay: 300 } }));
    const invalid = () =>
      quota.logLines().filter((l) => l.msg === 'policy file invalid; keeping the last good policy').length;
    const before = invalid();
    mount.write(
      JSON.stringify({ ...JSON.parse(policyText({ generation: 7 })), anonymous: { perMinute: -1 } }),
    );
    await expect.poll(invalid, { timeout: 30_000, interval: 50 }).toBe(before + 1);
    mount.write('{not json');
    await expect.poll(invalid, { timeout: 30_000, interval: 50 }).toBe(before + 2);
    await expectMinuteLimit(freshClient(), 3, 300);
    expect(applied(quota.logLines, 7)).toBe(false);
    // And the next valid file applies again.
    await swap(8, policyText({ generation: 8, anonymous: { perMinute: 1, perDay: 20 } }));
    await expectMinuteLimit(freshClient(), 1, 20);
  });
});
