// The key endpoint (spec 4.2, 5, 8) through the embedded app's in-process transport, with a fake model
// and the in-memory stores.

import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { multipart } from '../../test/support/multipart.ts';
import type { AccountTier } from './accounts/account-store.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));
const OPEN = '/api/open/detect';

type App = Awaited<ReturnType<typeof embeddedApp>>;
let current: App | undefined;

// The quota windows' clock: 2031-03-14T10:00:30Z, half way through a minute, 50 370 s before midnight.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);
const MIDNIGHT_S = '1931299200'; // 2031-03-15T00:00:00Z

async function start(env: Record<string, string> = {}) {
  current = await embeddedApp({ env, classifier: new FakeClassifier(), now: () => T0 });
  return current;
}

afterEach(async () => {
  await current?.app.close();
  current = undefined;
});

async function accountWithKey(app: App, tier: AccountTier = 'free', email = `${tier}@example.com`) {
  const account = await app.accountStore.createAccount({ email, tier });
  const key = await app.accountStore.createKey(account.id);
  if (!key) throw new Error('no key');
  return { account, key, secret: key.secret };
}

function detect(app: App, authorization?: string, extra: Record<string, string> = {}) {
  const headers: Record<string, string> = { 'content-type': 'image/jpeg', ...extra };
  if (authorization !== undefined) headers.authorization = authorization;
  return app.app.inject({ method: 'POST', url: OPEN, payload: JPEG, headers });
}

function expectError(res: { statusCode: number; json: () => unknown }, status: number, code: number) {
  expect(res.statusCode).toBe(status);
  const body = res.json() as Record<string, unknown>;
  expect(Object.keys(body).sort()).toEqual(['code', 'message']);
  expect(body.code).toBe(code);
}

describe('the key endpoint', () => {
  it('answers the same result as the anonymous endpoint, with the account quota headers', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    const res = await detect(app, `Bearer ${secret}`);
    expect(res.statusCode).toBe(200);
    const anon = await app.app.inject({
      method: 'POST',
      url: '/api/public/detect',
      payload: JPEG,
      headers: { 'content-type': 'image/jpeg' },
    });
    expect({ ...res.json().data, timing_ms: 0 }).toEqual({ ...anon.json().data, timing_ms: 0 });
    // Both name the model that scored and its own classes.
    expect(res.json().data).toMatchObject({
      model: 'mobilenet_v2',
      classes: { drawing: 0, hentai: 0, neutral: 1, porn: 0, sexy: 0 },
    });
    expect(res.headers['x-ratelimit-limit']).toBe('100');
    expect(res.headers['x-ratelimit-remaining']).toBe('99');
    expect(res.headers['x-ratelimit-reset']).toBe(MIDNIGHT_S);
    expect(res.headers['x-quota-tier']).toBe('free');
  });

  it('accepts multipart too', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    const { body, contentType } = multipart([{ name: 'file', filename: 'a.jpg', data: JPEG }]);
    const res = await app.app.inject({
      method: 'POST',
      url: OPEN,
      payload: body,
      headers: { 'content-type': contentType, authorization: `Bearer ${secret}` },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().data.image.format).toBe('jpeg');
  });

  it.each([
    ['missing', undefined],
    ['empty', ''],
    ['another scheme', `Basic nsk_live_${'a'.repeat(32)}`],
    ['no scheme', `nsk_live_${'a'.repeat(32)}`],
    ['too short', `Bearer nsk_live_${'a'.repeat(31)}`],
    ['too long', `Bearer nsk_live_${'a'.repeat(33)}`],
    ['uppercase hex', `Bearer nsk_live_${'A'.repeat(32)}`],
    ['test prefix', `Bearer nsk_test_${'a'.repeat(32)}`],
    ['unknown', `Bearer nsk_live_${'a'.repeat(32)}`],
  ])('answers 401/4011 for a %s key, and never counts it anywhere', async (_label, authorization) => {
    const app = await start({ ANON_PER_MINUTE: '1', ANON_PER_DAY: '1' });
    const res = await detect(app, authorization);
    expectError(res, 401, 4011);
    expect(res.headers['x-quota-tier']).toBeUndefined();
    // Never the anonymous quota: the one anonymous request of the day is still there.
    const anon = await app.app.inject({
      method: 'POST',
      url: '/api/public/detect',
      payload: JPEG,
      headers: { 'content-type': 'image/jpeg' },
    });
    expect(anon.statusCode).toBe(200);
  });

  it('refuses a revoked key on the very next request', async () => {
    const app = await start();
    const { key, secret } = await accountWithKey(app);
    expect((await detect(app, `Bearer ${secret}`)).statusCode).toBe(200);
    await app.accountStore.revokeKey(key.record.id);
    expectError(await detect(app, `Bearer ${secret}`), 401, 4011);
  });

  it('accepts the scheme in any case and extra spaces', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    expect((await detect(app, `bearer  ${secret}`)).statusCode).toBe(200);
  });
});

describe('account quotas', () => {
  it('free: refuses past the daily limit with 4291, Retry-After until UTC midnight', async () => {
    const app = await start({ FREE_PER_DAY: '3', FREE_PER_MINUTE: '3' });
    const { secret } = await accountWithKey(app);
    for (let i = 0; i < 3; i++) {
      const res = await detect(app, `Bearer ${secret}`);
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-remaining']).toBe(String(2 - i));
    }
    const refused = await detect(app, `Bearer ${secret}`);
    expectError(refused, 429, 4291);
    expect(refused.headers['x-ratelimit-limit']).toBe('3');
    expect(refused.headers['x-ratelimit-remaining']).toBe('0');
    expect(refused.headers['x-ratelimit-reset']).toBe(MIDNIGHT_S);
    expect(refused.headers['x-quota-tier']).toBe('free');
    expect(refused.headers['retry-after']).toBe('50370');
    // When it resets; no API key hint to a caller who has one.
    expect(refused.json().message).toBe(
      'Daily quota of 3 requests used; it resets at UTC midnight (2031-03-15T00:00:00Z)',
    );
  });

  it('free: 10 per minute by default, then 4290 with Retry-After within the minute', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    for (let i = 0; i < 10; i++) expect((await detect(app, `Bearer ${secret}`)).statusCode).toBe(200);
    const refused = await detect(app, `Bearer ${secret}`);
    expectError(refused, 429, 4290);
    expect(refused.headers['retry-after']).toBe('30');
    expect(refused.headers['x-ratelimit-remaining']).toBe('90');
    expect(refused.json().message).toBe(
      'Rate limited: 10 requests per minute; the minute resets at 2031-03-14T10:01:00Z',
    );
  });

  it('pro: 10,000 a day and 30 a minute by default', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app, 'pro');
    for (let i = 0; i < 30; i++) {
      const res = await detect(app, `Bearer ${secret}`);
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-limit']).toBe('10000');
      expect(res.headers['x-quota-tier']).toBe('pro');
    }
    expectError(await detect(app, `Bearer ${secret}`), 429, 4290);
  });

  it('counts per account, shared by all its keys, separate from other accounts', async () => {
    const app = await start({ FREE_PER_DAY: '4', FREE_PER_MINUTE: '4' });
    const { account, secret } = await accountWithKey(app);
    const second = await app.accountStore.createKey(account.id);
    const other = await accountWithKey(app, 'free', 'other@example.com');
    expect((await detect(app, `Bearer ${secret}`)).statusCode).toBe(200);
    expect((await detect(app, `Bearer ${second?.secret}`)).statusCode).toBe(200);
    expect((await detect(app, `Bearer ${secret}`)).statusCode).toBe(200);
    const last = await detect(app, `Bearer ${second?.secret}`);
    expect(last.headers['x-ratelimit-remaining']).toBe('0');
    expectError(await detect(app, `Bearer ${secret}`), 429, 4291);
    expectError(await detect(app, `Bearer ${second?.secret}`), 429, 4291);
    expect((await detect(app, `Bearer ${other.secret}`)).statusCode).toBe(200);
  });

  it('applies a tier change on the very next request', async () => {
    const app = await start({ FREE_PER_DAY: '2', FREE_PER_MINUTE: '2' });
    const { account, secret } = await accountWithKey(app);
    await detect(app, `Bearer ${secret}`);
    await detect(app, `Bearer ${secret}`);
    expectError(await detect(app, `Bearer ${secret}`), 429, 4291);
    await app.accountStore.setTier(account.id, 'pro');
    const res = await detect(app, `Bearer ${secret}`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-quota-tier']).toBe('pro');
    expect(res.headers['x-ratelimit-remaining']).toBe(String(10_000 - 3));
  });

  it('counts failed detections, not refusals', async () => {
    const app = await start({ FREE_PER_DAY: '2', FREE_PER_MINUTE: '2' });
    const { secret } = await accountWithKey(app);
    const bad = await app.app.inject({
      method: 'POST',
      url: OPEN,
      payload: 'not an image',
      headers: { 'content-type': 'image/png', authorization: `Bearer ${secret}` },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers['x-ratelimit-remaining']).toBe('1');
  });

  it('records when a key was last used', async () => {
    // The clock the app reads from its start: frozen, so the time recorded is known exactly.
    const now = new Date('2026-03-04T05:06:07.000Z');
    vi.useFakeTimers({ toFake: ['Date'], now });
    try {
      const app = await start();
      const { key, secret } = await accountWithKey(app);
      expect(key.record.lastUsedAt).toBeNull();
      await detect(app, `Bearer ${secret}`);
      await new Promise((r) => setTimeout(r, 10));
      const used = await app.accountStore.getKey(key.record.id);
      expect(used?.lastUsedAt).toBe(now.toISOString());
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('last use', () => {
  it('is written at most once per key per KEY_LAST_USED_INTERVAL_MS', async () => {
    const t = Date.parse('2026-03-04T05:06:07.000Z');
    vi.useFakeTimers({ toFake: ['Date'], now: t });
    try {
      const app = await start({ KEY_LAST_USED_INTERVAL_MS: '5000' });
      const { key, secret } = await accountWithKey(app);
      const usedAt = async (ms: number) => {
        vi.setSystemTime(t + ms);
        expect((await detect(app, `Bearer ${secret}`)).statusCode).toBe(200);
        await new Promise((r) => setTimeout(r, 10));
        return (await app.accountStore.getKey(key.record.id))?.lastUsedAt;
      };
      expect(await usedAt(0)).toBe(new Date(t).toISOString());
      expect(await usedAt(4999)).toBe(new Date(t).toISOString());
      expect(await usedAt(5000)).toBe(new Date(t + 5000).toISOString());
      // The store keeps the bound by itself, whoever calls it (another replica, the admin CLI).
      await app.accountStore.touchKey(key.record.id, new Date(t + 6000));
      expect((await app.accountStore.getKey(key.record.id))?.lastUsedAt).toBe(
        new Date(t + 5000).toISOString(),
      );
      await app.accountStore.touchKey(key.record.id, new Date(t + 10_000));
      expect((await app.accountStore.getKey(key.record.id))?.lastUsedAt).toBe(
        new Date(t + 10_000).toISOString(),
      );
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('store failures', () => {
  it('answers 503/5001 with Retry-After when the account store fails, never an allow', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    app.accountStore.resolveKey = async () => {
      throw new Error('connection lost');
    };
    const res = await detect(app, `Bearer ${secret}`);
    expectError(res, 503, 5001);
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  });

  it('answers 503/5001 when the quota store fails', async () => {
    const app = await start();
    const { secret } = await accountWithKey(app);
    app.quotaStore.consume = async () => {
      throw new Error('timeout');
    };
    expectError(await detect(app, `Bearer ${secret}`), 503, 5001);
  });
});

describe('refusals before capacity', () => {
  const madeUp = `Bearer nsk_live_${'5a'.repeat(16)}`;
  const from = (ip: string) => ({ 'x-forwarded-for': ip });

  /** Holds every key lookup until `release()`, as a store under load would: a lookup holds whatever it
   * holds meanwhile. `pending` counts the lookups waiting. */
  function heldStore(app: App) {
    const resolveKey = app.accountStore.resolveKey.bind(app.accountStore);
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const held = { pending: 0, release };
    app.accountStore.resolveKey = async (secret) => {
      if (secret !== madeUp.slice('Bearer '.length)) return resolveKey(secret);
      held.pending += 1;
      await released;
      return resolveKey(secret);
    };
    return held;
  }

  async function until(condition: () => boolean) {
    while (!condition()) await new Promise((r) => setTimeout(r, 5));
  }

  it('an unknown key is refused 401 without taking an admission: a flood of them leaves room for everyone else', async () => {
    const app = await start({ TRUSTED_PROXY_HOPS: '1', MAX_UPLOADS: '8' });
    const held = heldStore(app);
    const { secret } = await accountWithKey(app);
    // Ten times MAX_UPLOADS unknown keys in flight at once, each from its own address.
    const flood = Array.from({ length: 80 }, (_, i) => detect(app, madeUp, from(`203.0.113.${i}`)));
    await until(() => held.pending === 80);
    expect(app.gate.admitted).toBe(0);
    expect((await detect(app, `Bearer ${secret}`, from('198.51.100.7'))).statusCode).toBe(200);
    const anon = await app.app.inject({
      method: 'POST',
      url: '/api/public/detect',
      payload: JPEG,
      headers: { 'content-type': 'image/jpeg', ...from('198.51.100.8') },
    });
    expect(anon.statusCode).toBe(200);
    held.release();
    expect(new Set((await Promise.all(flood)).map((r) => r.statusCode))).toEqual(new Set([401]));
  });

  it('bounds the key lookups one address has in progress; other addresses are not affected', async () => {
    const app = await start({ TRUSTED_PROXY_HOPS: '1', MAX_UPLOADS_PER_CLIENT: '4' });
    const held = heldStore(app);
    const { secret } = await accountWithKey(app);
    const flood = Array.from({ length: 10 }, () => detect(app, madeUp, from('203.0.113.1')));
    await until(() => held.pending >= 4);
    expect((await detect(app, `Bearer ${secret}`, from('198.51.100.7'))).statusCode).toBe(200);
    held.release();
    const statuses = (await Promise.all(flood)).map((r) => r.statusCode);
    // Four lookups at once from the flooding address; the others were told to come back later.
    expect(statuses.filter((s) => s === 401)).toHaveLength(4);
    expect(statuses.filter((s) => s === 503)).toHaveLength(6);
  });

  it('bounds the key lookups of an IPv6 client by its /64, whichever of its addresses they come from', async () => {
    const app = await start({ TRUSTED_PROXY_HOPS: '1', MAX_UPLOADS_PER_CLIENT: '4' });
    const held = heldStore(app);
    const flood = Array.from({ length: 4 }, (_, i) => detect(app, madeUp, from(`2001:db8:7:8::${i + 1}`)));
    await until(() => held.pending === 4);
    expectError(await detect(app, madeUp, from('2001:db8:7:8:abcd::5')), 503, 5001);
    // Another /64 has bounds of its own.
    const other = detect(app, madeUp, from('2001:db8:7:9::1'));
    await until(() => held.pending === 5);
    held.release();
    expect((await Promise.all([...flood, other])).map((r) => r.statusCode)).toEqual([
      401, 401, 401, 401, 401,
    ]);
  });

  it('answers a missing or malformed key 401 even from an address at its lookup bound: it needs no lookup', async () => {
    const app = await start({ TRUSTED_PROXY_HOPS: '1', MAX_UPLOADS_PER_CLIENT: '4' });
    const held = heldStore(app);
    const flood = Array.from({ length: 4 }, () => detect(app, madeUp, from('203.0.113.1')));
    await until(() => held.pending === 4);
    // The bound is reached: a fifth well-formed key from there is told to come back later, uncounted …
    expectError(await detect(app, madeUp, from('203.0.113.1')), 503, 5001);
    // … while what is answered without the store is answered, whatever the lookups in progress.
    for (const authorization of [
      undefined,
      'Bearer nope',
      `Bearer nsk_live_${'5a'.repeat(15)}`,
      'Basic eA==',
    ]) {
      expectError(await detect(app, authorization, from('203.0.113.1')), 401, 4011);
    }
    held.release();
    expect((await Promise.all(flood)).map((r) => r.statusCode)).toEqual([401, 401, 401, 401]);
  });
});
