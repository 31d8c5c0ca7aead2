// Fairness behind the gateway, through the real Envoy of `npm run stack`: the per-client bound on
// uploads in progress holds by account on the key endpoint (the account ext_authz names) and by the
// client address Envoy appends on the anonymous one, while other clients keep being served; a client's
// own x-account-id or X-Forwarded-For changes nothing. Loopback clients are told apart by their source
// address (127.0.0.2, 127.0.0.3 …: the whole of 127/8 is loopback).

import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../lib/common/errors.ts';
import { admin } from '../../loadtests/run.ts';
import { accountSubject } from '../../services/quota/authorize.ts';
import { RedisLayout } from '../../services/quota/stores/redis-layout.ts';
import { type Stack, startStack } from '../../tools/stack/stack.ts';
import { childEnv } from '../support/children.ts';
import { parseSamples, sampleValue } from '../support/prometheus-text.ts';
import { type PartialUpload, partialUpload, type UploadAnswer, uploadFrom } from '../support/stack-client.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

/** MAX_UPLOADS_PER_CLIENT of this stack's detect. */
const BOUND = 4;
const UPLOADS = 30;
const BATCH = 6;

const ENV = {
  // Quotas out of the way: every refusal here is the bound's.
  ANON_PER_MINUTE: '100000',
  ANON_PER_DAY: '1000000',
  PRO_PER_MINUTE: '100000',
  PRO_PER_DAY: '1000000',
  MAX_UPLOADS_PER_CLIENT: String(BOUND),
  // The stalled uploads must stay in progress for the whole test, not be cut as too slow.
  UPLOAD_MIN_BYTES_PER_SECOND: '0',
  UPLOAD_IDLE_TIMEOUT_MS: '120000',
};

/** The spec's answer to a request refused for want of room: 503/5001 with Retry-After, uncharged. */
function expectBusy(answer: UploadAnswer, what: string): void {
  expect({ status: answer.status, code: answer.code }, what).toEqual({
    status: 503,
    code: ERRORS.UNAVAILABLE.code,
  });
  expect(Number(answer.headers['retry-after']), `${what}: Retry-After`).toBeGreaterThanOrEqual(1);
}

function expectScored(answer: UploadAnswer, what: string): void {
  expect({ status: answer.status, code: answer.code }, `${what}: ${answer.body}`).toEqual({
    status: 200,
    code: 0,
  });
}

describeWithStackTools('fairness behind the gateway', ['helm', 'envoy', 'jaeger'], { redis: true }, () => {
  let stack: Stack;
  let edge: string;
  let adminEnv: Record<string, string>;
  let stalled: PartialUpload[] = [];

  beforeAll(async () => {
    stack = await startStack({ port: 0, env: childEnv({ ...process.env, ...ENV }) });
    edge = stack.edgeUrl;
    adminEnv = { REDIS_URL: stack.redisUrl, REDIS_COMMAND_TIMEOUT_MS: '1000', ...ENV };
    // Warm: a burst of 30 checks on a cold quota process can outlast ext_authz's bound (an
    // Envoy-made 503 that never reaches detect).
    const warm = await newAccount();
    for (let i = 0; i < 3; i++) {
      await uploadFrom(edge, '127.0.0.1');
      await uploadFrom(edge, '127.0.0.1', { path: '/api/open/detect', headers: warm.auth });
    }
  }, 300_000);
  afterEach(async () => {
    for (const upload of stalled) upload.abort();
    await Promise.allSettled(stalled.map((u) => u.done));
    stalled = [];
  });
  afterAll(async () => {
    await stack?.stop();
  }, 60_000);

  async function newAccount(): Promise<{ id: string; auth: Record<string, string> }> {
    const email = `fair-${randomBytes(4).toString('hex')}@example.com`;
    const created = (await admin(adminEnv, ['create-account', '--email', email, '--tier', 'pro'])) as {
      account: { id: string };
    };
    const { secret } = (await admin(adminEnv, ['issue-key', email, '--name', 'fair'])) as { secret: string };
    return { id: created.account.id, auth: { authorization: `Bearer ${secret}` } };
  }

  /** Uploads detect holds now (its gauge). */
  async function admitted(): Promise<number | undefined> {
    const text = await (await fetch(`${stack.serviceUrls.detect}/metrics`)).text();
    return sampleValue(parseSamples(text), 'nsfwdetector_work_admitted');
  }

  /**
   * Starts `UPLOADS` stalled uploads, `BATCH` at a time (each batch answered or held before the next: a
   * burst of 30 ext_authz checks on a loaded machine can outlast their bound, which is an Envoy-made 503
   * that never reaches detect); resolves with the answers once detect holds `BOUND` of them. A refusal
   * comes once detect has given up waiting for the rest of the stalled body (its idle bound, 2 s).
   */
  async function stallMany(make: (i: number) => PartialUpload): Promise<UploadAnswer[]> {
    stalled = [];
    for (let i = 0; i < UPLOADS; i += BATCH) {
      for (let j = i; j < Math.min(i + BATCH, UPLOADS); j++) stalled.push(make(j));
      await expect
        .poll(async () => stalled.filter((u) => u.answered).length + ((await admitted()) ?? 0), {
          timeout: 15_000,
        })
        .toBe(stalled.length);
    }
    expect({ answered: stalled.filter((u) => u.answered).length, held: await admitted() }).toEqual({
      answered: UPLOADS - BOUND,
      held: BOUND,
    });
    return Promise.all(stalled.filter((u) => u.answered).map((u) => u.done));
  }

  it('bounds one key’s uploads in progress by its account, uncharged, while others are served', {
    timeout: 120_000,
  }, async () => {
    const greedy = await newAccount();
    const other = await newAccount();
    const refused = await stallMany((i) =>
      partialUpload(edge, {
        path: '/api/open/detect',
        // Forged identity: stripped at the edge, so every one of these is the greedy account.
        headers: { ...greedy.auth, 'x-account-id': `acc_forged${i}`, 'x-forwarded-for': `203.0.113.${i}` },
      }),
    );
    for (const answer of refused) expectBusy(answer, 'past the account’s bound');
    expect(refused.some((a) => a.message?.includes('for this account'))).toBe(true);

    // Held: the other account, and anonymous clients (this address included), are served.
    expectScored(
      await uploadFrom(edge, '127.0.0.1', { path: '/api/open/detect', headers: other.auth }),
      'other account',
    );
    expectScored(await uploadFrom(edge, '127.0.0.1'), 'anonymous, same address');
    expectScored(await uploadFrom(edge, '127.0.0.3'), 'anonymous, other address');
    // The greedy account from another address is still itself.
    expectBusy(
      await uploadFrom(edge, '127.0.0.4', { path: '/api/open/detect', headers: greedy.auth }),
      'greedy again',
    );

    // The refusals were taken back by the quota sidecar: only the uploads held are counted.
    const redis = new Redis(stack.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    try {
      const dayKey = new RedisLayout('nsfwd:').day(accountSubject(greedy.id));
      await expect
        .poll(async () => Number((await redis.hget(dayKey, 'n')) ?? 0), { timeout: 15_000 })
        .toBe(BOUND);
    } finally {
      redis.disconnect();
    }

    // Once the stalled uploads are gone, the account is served again.
    for (const upload of stalled) upload.abort();
    await expect
      .poll(
        async () =>
          (await uploadFrom(edge, '127.0.0.1', { path: '/api/open/detect', headers: greedy.auth })).status,
        {
          timeout: 15_000,
        },
      )
      .toBe(200);
  });

  it('bounds one address’s anonymous uploads in progress by the address Envoy saw, whatever it claims', {
    timeout: 120_000,
  }, async () => {
    const keyed = await newAccount();
    const refused = await stallMany((i) =>
      partialUpload(edge, {
        localAddress: '127.0.0.2',
        headers: {
          'x-forwarded-for': `198.51.100.${i}`,
          'x-account-id': `acc_forged${i}`,
          'x-quota-tier': 'pro',
        },
      }),
    );
    for (const answer of refused) expectBusy(answer, 'past the address’s bound');
    expect(refused.some((a) => a.message?.includes('uploads in progress'))).toBe(true);

    // Another address claiming to be the greedy one is served as itself; so are the others.
    expectScored(
      await uploadFrom(edge, '127.0.0.3', { headers: { 'x-forwarded-for': '127.0.0.2' } }),
      'other address',
    );
    expectScored(await uploadFrom(edge, '127.0.0.1'), 'anonymous, third address');
    expectScored(
      await uploadFrom(edge, '127.0.0.1', { path: '/api/open/detect', headers: keyed.auth }),
      'a key',
    );
    // The greedy address posing as another is still itself.
    expectBusy(
      await uploadFrom(edge, '127.0.0.2', { headers: { 'x-forwarded-for': '192.0.2.1' } }),
      'greedy again',
    );
  });
});
