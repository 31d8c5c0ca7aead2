// The finding of issue 48 (item 4), replayed on a compressed schedule: one home IPv6 allocation (a /56:
// 50 of its /64s) signs up for two minutes, each /64 once a second, while real people sign up every
// 5 s, each from a network of their own (new emails). The clock is the stores' own, set by the test
// (the same minutes and the same ratios as the attack in real time: 50 sign-ups a second against
// SIGNUP_PER_MINUTE 30), so the two minutes take a few seconds. The production limits throughout
// (settings' defaults, DEFAULT_ATTEMPT_LIMITS), on both stores: memory, and Redis (one script).
//
// Attack 1 repeats ONE existing email (it creates nothing: every sign-up used to count against the
// total, so the minute's 30 were gone in its first second); attack 2 signs up a new email each time
// (it creates accounts, but its network takes at most its share). Either way ≥ 90% of the real
// people's sign-ups go through (all of them, in fact: nothing else bounds them).

import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decorateClientKey } from '../../../lib/common/client-key.ts';
import { installEnvelopeHandlers } from '../../../lib/common/envelope.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import { RedisServer } from '../../../test/support/redis-server.ts';
import { describeWithTool, REDIS_SERVER } from '../../../test/support/tools.ts';
import { accountSubject } from '../authorize.ts';
import type { QuotaStore } from '../quota-store.ts';
import type { SharedBudgetStore } from '../shared-budget.ts';
import { MemoryQuotaStore } from '../stores/memory-quota-store.ts';
import { testClock } from '../stores/quota-store.contract.ts';
import { connectRedis, redisReady } from '../stores/redis-connection.ts';
import { RedisQuotaStore } from '../stores/redis-quota-store.ts';
import { memoryAccountStore } from '../stores/sqlite-account-store.ts';
import consoleApp from './app.ts';
import { hashPassword } from './passwords.ts';

const FAST_SCRYPT = { N: 2 ** 10, r: 8, p: 1 };
const TIERS = { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } };
const PASSWORD = 'correct horse battery';
const SIGNUP_TOTAL = {
  perMinute: SETTINGS.SIGNUP_PER_MINUTE.default,
  perDay: SETTINGS.SIGNUP_PER_DAY.default,
};
// 2031-03-14T10:00:30Z: the two minutes span three UTC minutes.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);
const ATTACK_SECONDS = 120;
const ATTACKER_64S = 50;
const REAL_EVERY_S = 5;

type Store = QuotaStore & SharedBudgetStore;

/** One of the attacker's /64s, all in 2001:db8:ab:cd00::/56. */
const attackerAddress = (i: number) =>
  `2001:db8:ab:cd${i.toString(16).padStart(2, '0')}::${(i + 1).toString(16)}`;
/** The n-th real person: an address of a network of their own (IPv4 /24s and IPv6 /48s in turn). */
const realAddress = (n: number) => (n % 2 ? `198.18.${n}.7` : `2001:db8:${(0x100 + n).toString(16)}::7`);

async function scenario(open: (now: () => number) => Promise<Store>, attackEmail: (n: number) => string) {
  const clock = testClock(T0);
  const store = await open(clock.now);
  const accounts = memoryAccountStore();
  const app = Fastify({ logger: false, trustProxy: true });
  decorateClientKey(app);
  installEnvelopeHandlers(app);
  await app.register(consoleApp, {
    accounts,
    sessions: accounts,
    quotaStore: store,
    accountLimits: TIERS,
    accountSubject,
    scrypt: FAST_SCRYPT,
    signupTotal: SIGNUP_TOTAL,
  });
  await app.ready();
  try {
    await accounts.createAccount({
      email: 'victim@example.com',
      tier: 'free',
      passwordHash: await hashPassword(PASSWORD, FAST_SCRYPT),
    });
    const signup = (email: string, from: string) =>
      app.inject({
        method: 'POST',
        url: '/console/api/signup',
        headers: { 'x-forwarded-for': from },
        payload: { email, password: PASSWORD },
      });
    const attack: Record<number, number> = {};
    const real: Array<{ at: number; status: number; message?: string }> = [];
    let sent = 0;
    for (let s = 0; s < ATTACK_SECONDS; s++) {
      // Each of the 50 /64s at once (concurrent: the stores' steps must hold), then the real person.
      const answers = await Promise.all(
        Array.from({ length: ATTACKER_64S }, (_, i) => signup(attackEmail(sent++), attackerAddress(i))),
      );
      for (const a of answers) attack[a.statusCode] = (attack[a.statusCode] ?? 0) + 1;
      if (s % REAL_EVERY_S === 0) {
        const n = s / REAL_EVERY_S;
        const res = await signup(`person${n}@example.org`, realAddress(n));
        real.push({
          at: s,
          status: res.statusCode,
          ...(res.statusCode === 202 ? {} : { message: res.json().message }),
        });
      }
      clock.advance(1000);
    }
    const through = real.filter((r) => r.status === 202).length;
    console.log(
      `sign-ups for ${ATTACK_SECONDS} s from ${ATTACKER_64S} /64s of one /56 (${ATTACKER_64S}/s): ${JSON.stringify(attack)}; ` +
        `real people every ${REAL_EVERY_S} s: ${through} of ${real.length} through` +
        (through < real.length ? ` (refused: ${JSON.stringify(real.filter((r) => r.status !== 202))})` : ''),
    );
    return { attack, real, through, accounts: await accounts.listAccounts() };
  } finally {
    await app.close();
    await store.close();
  }
}

function signupBudgetCases(open: (now: () => number) => Promise<Store>) {
  it('one existing email from 50 /64s of a /56 for two minutes: real people on other networks get through', async () => {
    const { attack, real, through, accounts } = await scenario(open, () => 'victim@example.com');
    expect(real).toHaveLength(ATTACK_SECONDS / REAL_EVERY_S);
    expect(through).toBeGreaterThanOrEqual(Math.ceil(0.9 * real.length));
    // The attack ran, and was answered 202 only as the per-email bound allows (3 a minute, 10 a day).
    expect((attack[202] ?? 0) + (attack[429] ?? 0)).toBe(ATTACK_SECONDS * ATTACKER_64S);
    expect(attack[202]).toBeLessThanOrEqual(10);
    expect(accounts).toHaveLength(1 + through);
  }, 120_000);

  it('new emails from 50 /64s of a /56 for two minutes: the /56 takes only its share, others get through', async () => {
    const { attack, real, through, accounts } = await scenario(open, (n) => `bot${n}@example.net`);
    expect(through).toBeGreaterThanOrEqual(Math.ceil(0.9 * real.length));
    // The network's share: 10% of 30 a minute, over three UTC minutes.
    expect(attack[202]).toBeLessThanOrEqual(3 * 3);
    expect(accounts).toHaveLength(1 + through + (attack[202] ?? 0));
  }, 120_000);
}

describe('sign-up budget under attack, memory store', () => {
  signupBudgetCases(async (now) => new MemoryQuotaStore(now));
});

describeWithTool(REDIS_SERVER, 'sign-up budget under attack, Redis store (real redis-server)', () => {
  let redis: RedisServer;
  let prefixes = 0;
  beforeAll(async () => {
    redis = await RedisServer.start();
  }, 30_000);
  afterAll(async () => {
    await redis?.stop();
  });
  signupBudgetCases(async (now) => {
    const client = connectRedis({
      target: redis.url,
      commandTimeoutMs: 2000,
      socketTimeoutMs: 2000,
      connectTimeoutMs: 2000,
    });
    await redisReady(client, 5000);
    return new RedisQuotaStore(client, `sb${++prefixes}:`, undefined, now);
  });
});
