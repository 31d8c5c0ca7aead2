import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decorateClientKey } from '../../../lib/common/client-key.ts';
import { installEnvelopeHandlers } from '../../../lib/common/envelope.ts';
import { StoreWriteError } from '../accounts/account-store.ts';
import { accountSubject } from '../authorize.ts';
import { MemoryQuotaStore } from '../stores/memory-quota-store.ts';
import { memoryAccountStore, type SqliteAccountStore } from '../stores/sqlite-account-store.ts';
import consoleApp, { type ConsoleAttemptLimits } from './app.ts';
import { readCookie, SESSION_COOKIE } from './cookies.ts';
import { csrfToken } from './csrf.ts';
import { DEVICE_COOKIE } from './known-device.ts';
import { DEFAULT_SCRYPT, hashPassword, type ScryptParams, verifyPassword } from './passwords.ts';

const FAST_SCRYPT = { N: 2 ** 10, r: 8, p: 1 };
const TIERS = { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } };
const PASSWORD = 'correct horse battery';

interface Ctx {
  app: FastifyInstance;
  accounts: SqliteAccountStore;
  quota: MemoryQuotaStore;
}

const SIGNUP_TOTAL = { perMinute: 1000, perDay: 10_000 };

async function build(
  attemptLimits?: ConsoleAttemptLimits,
  now?: () => number,
  more: { signupTotal?: typeof SIGNUP_TOTAL; scrypt?: ScryptParams; maxActiveKeys?: number } = {},
): Promise<Ctx> {
  const app = Fastify({ logger: false, trustProxy: true });
  decorateClientKey(app);
  installEnvelopeHandlers(app);
  const accounts = memoryAccountStore();
  const quota = new MemoryQuotaStore(now);
  await app.register(consoleApp, {
    accounts,
    sessions: accounts,
    quotaStore: quota,
    accountLimits: TIERS,
    accountSubject,
    scrypt: more.scrypt ?? FAST_SCRYPT,
    signupTotal: more.signupTotal ?? SIGNUP_TOTAL,
    maxActiveKeys: more.maxActiveKeys ?? 3,
    ...(attemptLimits ? { attemptLimits } : {}),
  });
  await app.ready();
  return { app, accounts, quota };
}

function cookieOf(res: LightMyRequestResponse): string {
  const header = res.headers['set-cookie'];
  const line = Array.isArray(header) ? header[0] : header;
  if (!line) throw new Error('no Set-Cookie');
  return line;
}

/**
 * Signs up and logs in, as the page does, and returns what a browser would hold: the cookie pair, the
 * CSRF token and the login's answer.
 */
async function signUp(app: FastifyInstance, email = 'ada@example.com') {
  const res = await app.inject({
    method: 'POST',
    url: '/console/api/signup',
    payload: { email, password: PASSWORD },
  });
  expect(res.statusCode).toBe(202);
  expect(res.headers['set-cookie']).toBeUndefined();
  const login = await app.inject({
    method: 'POST',
    url: '/console/api/login',
    payload: { email, password: PASSWORD },
  });
  expect(login.statusCode).toBe(200);
  const token = readCookie(cookieOf(login).split(';')[0], SESSION_COOKIE) ?? '';
  return {
    cookie: `${SESSION_COOKIE}=${token}`,
    csrf: login.json().data.csrfToken as string,
    body: login.json(),
  };
}

/** An account with a console password, made without a request (no attempt is counted). */
async function createOwner(ctx: Ctx, email = 'ada@example.com') {
  return ctx.accounts.createAccount({
    email,
    tier: 'free',
    passwordHash: await hashPassword(PASSWORD, FAST_SCRYPT),
  });
}

// The console's quota store runs on a set clock: 2031-03-14T10:00:30Z.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);

describe('console', () => {
  let ctx: Ctx;
  beforeEach(async () => {
    ctx = await build(undefined, () => T0);
  });
  afterEach(async () => {
    await ctx.app.close();
  });

  it('serves the page and its assets with a strict CSP and no caching', async () => {
    for (const [url, type] of [
      ['/console', 'text/html'],
      ['/console/', 'text/html'],
      ['/console/assets/console.js', 'text/javascript'],
      ['/console/assets/console.css', 'text/css'],
    ] as const) {
      const res = await ctx.app.inject({ url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type']).toContain(type);
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      expect(res.headers['content-security-policy']).toContain("frame-ancestors 'none'");
      expect(res.headers['x-frame-options']).toBe('DENY');
    }
  });

  it('signs up (202, no session) then logs in: session cookie HttpOnly, SameSite=Strict, Path=/console; a salted scrypt hash is stored', async () => {
    const { body } = await signUp(ctx.app);
    expect(body.code).toBe(0);
    expect(body.data.account).toMatchObject({ email: 'ada@example.com', tier: 'free' });
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/signup',
      payload: { email: 'Bob@example.com', password: PASSWORD },
    });
    expect(res.json()).toEqual({ code: 0, message: 'ok', data: { email: 'bob@example.com', next: 'login' } });
    const login = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      payload: { email: 'bob@example.com', password: PASSWORD },
    });
    const cookie = cookieOf(login);
    expect(cookie).toMatch(/^nsd_session=[0-9a-f]{64}; /);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/console');
    expect(cookie).not.toContain('Secure');
    const ada = await ctx.accounts.findAccountByEmail('ada@example.com');
    const bob = await ctx.accounts.findAccountByEmail('bob@example.com');
    expect(ada?.passwordHash).toMatch(/^scrypt\$/);
    expect(ada?.passwordHash).not.toBe(bob?.passwordHash); // same password, different salt
    expect(ada?.passwordHash).not.toContain(PASSWORD);
  });

  it('marks the cookie Secure when the request came over https', async () => {
    await createOwner(ctx, 'sec@example.com');
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      headers: { 'x-forwarded-proto': 'https' },
      payload: { email: 'sec@example.com', password: PASSWORD },
    });
    expect(cookieOf(res)).toContain('Secure');
  });

  it('refuses bad sign-ups with 4001', async () => {
    await signUp(ctx.app, 'dup@example.com');
    const cases: Array<[unknown, string]> = [
      [{ email: 'not-an-email', password: PASSWORD }, 'valid email'],
      [{ email: 'x@example.com', password: 'short' }, 'at least 10'],
      [{ email: 'x@example.com' }, 'password'],
      [{ email: 'x@example.com', password: 'p'.repeat(300) }, 'at most'],
      [[1, 2], 'JSON object'],
    ];
    for (const [payload, message] of cases) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: '/console/api/signup',
        payload: payload as object,
      });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().code).toBe(4001);
      expect(res.json().message).toContain(message);
    }
    // A body a cross-site HTML form could send is not even parsed.
    const form = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/signup',
      headers: { 'content-type': 'text/plain' },
      payload: '{"email":"y@example.com","password":"correct horse battery"}',
    });
    expect(form.json().code).toBe(4001);
    const urlencoded = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/signup',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'email=y%40example.com&password=correct+horse+battery',
    });
    expect(urlencoded.json().code).toBe(4001);
  });

  it('logs in with the right password only (4011 otherwise), with a fresh session each time', async () => {
    const first = await signUp(ctx.app);
    const wrong = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      payload: { email: 'ada@example.com', password: 'wrong password!' },
    });
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json()).toEqual({ code: 4011, message: 'Wrong email or password' });
    const unknown = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      payload: { email: 'nobody@example.com', password: PASSWORD },
    });
    expect(unknown.json()).toEqual({ code: 4011, message: 'Wrong email or password' });

    const good = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      headers: { cookie: first.cookie },
      payload: { email: 'ADA@example.com', password: PASSWORD },
    });
    expect(good.statusCode).toBe(200);
    const newCookie = cookieOf(good).split(';')[0] ?? '';
    expect(newCookie).not.toBe(first.cookie);
    // The session presented at login ended (no fixation); the new one works.
    const old = await ctx.app.inject({ url: '/console/api/session', headers: { cookie: first.cookie } });
    expect(old.json().code).toBe(4011);
    const now = await ctx.app.inject({ url: '/console/api/session', headers: { cookie: newCookie } });
    expect(now.json().data.account.email).toBe('ada@example.com');
  });

  it('an account without a password (admin CLI) cannot log in', async () => {
    await ctx.accounts.createAccount({ email: 'cli@example.com', tier: 'pro' });
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      payload: { email: 'cli@example.com', password: PASSWORD },
    });
    expect(res.json().code).toBe(4011);
  });

  it('answers 4011 without a valid session', async () => {
    for (const cookie of [undefined, `${SESSION_COOKIE}=nonsense`, `${SESSION_COOKIE}=${'a'.repeat(64)}`]) {
      for (const url of ['/console/api/session', '/console/api/keys', '/console/api/usage']) {
        const res = await ctx.app.inject({ url, headers: cookie ? { cookie } : {} });
        expect(res.statusCode).toBe(401);
        expect(res.json()).toEqual({ code: 4011, message: 'Not logged in' });
      }
    }
  });

  it('creates a key (secret once), lists it masked, revokes it', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    const created = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/keys',
      headers: { cookie, 'x-csrf-token': csrf },
      payload: { name: '  production ' },
    });
    expect(created.statusCode).toBe(201);
    const { secret, key } = created.json().data;
    expect(secret).toMatch(/^nsk_live_[0-9a-f]{32}$/);
    expect(key).toMatchObject({ name: 'production', revokedAt: null });
    expect(key.masked).toBe(`${secret.slice(0, 13)}…${secret.slice(-4)}`);
    expect((await ctx.accounts.resolveKey(secret))?.key.id).toBe(key.id);

    const listed = await ctx.app.inject({ url: '/console/api/keys', headers: { cookie } });
    expect(listed.json().data.keys).toEqual([key]);
    expect(listed.body).not.toContain(secret);

    const revoked = await ctx.app.inject({
      method: 'POST',
      url: `/console/api/keys/${key.id}/revoke`,
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json().data.key.revokedAt).toEqual(expect.any(String));
    expect(await ctx.accounts.resolveKey(secret)).toBeUndefined();
  });

  it('caps active keys per account', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    const create = () =>
      ctx.app.inject({ method: 'POST', url: '/console/api/keys', headers: { cookie, 'x-csrf-token': csrf } });
    for (let i = 0; i < 3; i += 1) expect((await create()).statusCode).toBe(201);
    const fourth = await create();
    expect(fourth.statusCode).toBe(400);
    expect(fourth.json().code).toBe(4001);
  });

  it('keeps the active-keys limit under 100 concurrent creations: exactly the limit are made', async () => {
    const wide = await build(undefined, () => T0, { maxActiveKeys: 20 });
    try {
      const { cookie, csrf } = await signUp(wide.app);
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          wide.app.inject({
            method: 'POST',
            url: '/console/api/keys',
            headers: { cookie, 'x-csrf-token': csrf },
            payload: { name: `k${i}` },
          }),
        ),
      );
      const codes = answers.map((a) => a.statusCode);
      expect(codes.filter((c) => c === 201)).toHaveLength(20);
      expect(codes.filter((c) => c === 400)).toHaveLength(80);
      expect(answers.find((a) => a.statusCode === 400)?.json().message).toBe(
        'At most 20 active keys per account; revoke one first',
      );
      const [account] = await wide.accounts.listAccounts();
      const keys = await wide.accounts.listKeys(account?.id as string);
      expect(keys.filter((k) => k.revokedAt === null)).toHaveLength(20);
    } finally {
      await wide.app.close();
    }
  });

  it('normalises key names and refuses invisible, bidi and control characters and lone surrogates', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    const create = (name: string) =>
      ctx.app.inject({
        method: 'POST',
        url: '/console/api/keys',
        headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' },
        // Written by hand so that a lone surrogate reaches the server as the JSON escape it is.
        payload: `{"name":${JSON.stringify(name).replace(/[\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`)}}`,
      });
    for (const bad of [
      'ci\u202Egnp.exe', // right-to-left override
      'ci\u200Bprod', // zero-width space
      'ci\u2066x', // left-to-right isolate
      'ci\u0007', // bell
      'ci\ud800', // unpaired high surrogate
      '\udc00ci', // unpaired low surrogate
    ]) {
      const res = await create(bad);
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
      expect(res.json().code).toBe(4001);
      expect(res.json().message).toMatch(
        /^The key name contains an invisible or control character \(U\+[0-9A-F]{4}\)/,
      );
    }
    const fine = await create('  ＣＩ ﬁle  ');
    expect(fine.statusCode).toBe(201);
    expect(fine.json().data.key.name).toBe('CI file');
  });

  it('refuses a body over the console limit with that limit in the message', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    for (const url of ['/console/api/keys', '/console/api/login', '/console/api/signup']) {
      const res = await ctx.app.inject({
        method: 'POST',
        url,
        headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' },
        payload: JSON.stringify({ name: 'x'.repeat(70 * 1024), email: 'a@b.c', password: 'p' }),
      });
      expect(res.statusCode, url).toBe(400);
      expect(res.json(), url).toEqual({
        code: 4001,
        message: 'Request body too large: the limit is 16384 bytes',
      });
    }
  });

  it('answers 503/5001 saying the change was not saved when the store refuses a write', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    ctx.accounts.createKey = async () => {
      throw new StoreWriteError('the accounts database did not save the change: database or disk is full');
    };
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/keys',
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(res.statusCode).toBe(503);
    expect(res.json()).toEqual({
      code: 5001,
      message:
        'The change was not saved (the account store refused the write); nothing was changed, try again later',
    });
  });

  it('cannot revoke another account’s key, or a key that does not exist', async () => {
    const ada = await signUp(ctx.app, 'ada@example.com');
    const bob = await signUp(ctx.app, 'bob@example.com');
    const created = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/keys',
      headers: { cookie: ada.cookie, 'x-csrf-token': ada.csrf },
    });
    const keyId = created.json().data.key.id;
    for (const id of [keyId, 'key_0000000000000000', '..%2F..%2Fx']) {
      const res = await ctx.app.inject({
        method: 'POST',
        url: `/console/api/keys/${id}/revoke`,
        headers: { cookie: bob.cookie, 'x-csrf-token': bob.csrf },
      });
      expect(res.statusCode).toBe(400);
      expect(res.json().code).toBe(4001);
    }
    expect((await ctx.accounts.getKey(keyId))?.revokedAt).toBeNull();
  });

  it('derives the CSRF token as HMAC-SHA256 of a fixed label keyed by the session token', () => {
    // openssl dgst -sha256 -hmac ses_0123456789abcdef <<< 'nsfwdetector console csrf v1' (no newline)
    expect(csrfToken('ses_0123456789abcdef')).toBe(
      '2aab1d64d4b7d8194aac05591221fa537dff68b7531aef4b133b304a407deb83',
    );
  });

  it('requires the session’s CSRF token and a same-origin request for every change', async () => {
    const ada = await signUp(ctx.app, 'ada@example.com');
    const bob = await signUp(ctx.app, 'bob@example.com');
    expect(ada.csrf).toMatch(/^[0-9a-f]{64}$/);
    expect(ada.csrf).not.toBe(bob.csrf);
    const attempts: Array<Record<string, string>> = [
      { cookie: ada.cookie },
      { cookie: ada.cookie, 'x-csrf-token': '' },
      { cookie: ada.cookie, 'x-csrf-token': bob.csrf },
      { cookie: ada.cookie, 'x-csrf-token': ada.csrf, origin: 'https://evil.example' },
      { cookie: ada.cookie, 'x-csrf-token': ada.csrf, origin: 'null' },
      { cookie: ada.cookie, 'x-csrf-token': ada.csrf, 'sec-fetch-site': 'cross-site' },
      { cookie: ada.cookie, 'x-csrf-token': ada.csrf, 'sec-fetch-site': 'same-site' },
    ];
    for (const headers of attempts) {
      for (const url of ['/console/api/keys', '/console/api/logout']) {
        const res = await ctx.app.inject({ method: 'POST', url, headers });
        expect(res.statusCode, `${url} ${JSON.stringify(headers)}`).toBe(401);
        expect(res.json().code).toBe(4011);
      }
    }
    expect(await ctx.accounts.listKeys(ada.body.data.account.id)).toEqual([]);
    // Same origin, as the page sends it: accepted.
    const ok = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/keys',
      headers: {
        cookie: ada.cookie,
        'x-csrf-token': ada.csrf,
        origin: 'http://localhost:80',
        host: 'localhost:80',
        'sec-fetch-site': 'same-origin',
      },
    });
    expect(ok.statusCode).toBe(201);
    // Login and sign-up from another site are refused too (login CSRF).
    const crossLogin = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/login',
      headers: { origin: 'https://evil.example' },
      payload: { email: 'ada@example.com', password: PASSWORD },
    });
    expect(crossLogin.json().code).toBe(4011);
  });

  it('logs out: the session ends and the cookie is cleared', async () => {
    const { cookie, csrf } = await signUp(ctx.app);
    const res = await ctx.app.inject({
      method: 'POST',
      url: '/console/api/logout',
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(res.statusCode).toBe(200);
    expect(cookieOf(res)).toMatch(/^nsd_session=; .*Max-Age=0/);
    const after = await ctx.app.inject({ url: '/console/api/session', headers: { cookie } });
    expect(after.json().code).toBe(4011);
  });

  it("shows today's usage of the account from the counters authorize uses", async () => {
    const { cookie, body } = await signUp(ctx.app);
    const id = body.data.account.id as string;
    for (let i = 0; i < 3; i += 1) await ctx.quota.consume(accountSubject(id), TIERS.free);
    const res = await ctx.app.inject({ url: '/console/api/usage', headers: { cookie } });
    const { data } = res.json();
    expect(data.tier).toBe('free');
    // 2031-03-15T00:00:00Z and 2031-03-14T10:01:00Z
    expect(data.day).toEqual({ used: 3, limit: 100, remaining: 97, resetAt: 1_931_299_200 });
    expect(data.minute).toEqual({ used: 3, limit: 10, remaining: 7, resetAt: 1_931_248_860 });
    await ctx.accounts.setTier(id, 'pro');
    const pro = (await ctx.app.inject({ url: '/console/api/usage', headers: { cookie } })).json().data;
    expect(pro).toMatchObject({ tier: 'pro', day: { used: 3, limit: 10_000, remaining: 9_997 } });
  });

  it('shows 30 days of served and refused requests, of the account or of one of its own keys', async () => {
    const { cookie, body } = await signUp(ctx.app);
    const id = body.data.account.id as string;
    const other = await signUp(ctx.app, 'grace@example.com');
    const subject = accountSubject(id);
    const tight = { perMinute: 1, perDay: 100 };
    await ctx.quota.consume(subject, tight, undefined, [subject, 'key:key_00000000000000aa']);
    await ctx.quota.consume(subject, tight, undefined, [subject, 'key:key_00000000000000aa']); // refused
    const history = async (query = '', c = cookie) =>
      (await ctx.app.inject({ url: `/console/api/usage/history${query}`, headers: { cookie: c } })).json();
    const account = await history();
    expect(account.data.dailyLimit).toBe(100);
    expect(account.data.days).toHaveLength(30);
    expect(account.data.days[0]).toEqual({ day: '2031-02-13', served: 0, refused: 0 });
    expect(account.data.days.at(-1)).toEqual({
      day: '2031-03-14',
      served: 1,
      refused: 1,
    });
    // A key that is not the account's: 404, whoever owns it.
    expect((await history('?key=key_00000000000000aa')).code).toBe(4040);
    expect((await history('?key=nonsense', other.cookie)).code).toBe(4040);
    expect((await ctx.app.inject({ url: '/console/api/usage/history' })).json().code).toBe(4011);
  });
});

describe('console login limits', () => {
  it('limits attempts per email and per client IP with 429/4290 and Retry-After', async () => {
    // Windows are per calendar minute: a real clock crossing one mid-test would reset the counts.
    const midMinute = Date.UTC(2026, 0, 15, 12, 30, 30);
    const ctx = await build(
      {
        loginPerIp: { perMinute: 4, perDay: 100 },
        loginPerEmail: { perMinute: 2, perDay: 100 },
        signupPerIp: { perMinute: 2, perDay: 100 },
      },
      () => midMinute,
    );
    try {
      await createOwner(ctx, 'ada@example.com');
      const login = (email: string, ip: string, password = 'wrong password!') =>
        ctx.app.inject({
          method: 'POST',
          url: '/console/api/login',
          headers: { 'x-forwarded-for': ip },
          payload: { email, password },
        });
      // Per email, whichever address tries it.
      expect((await login('ada@example.com', '10.0.0.1')).json().code).toBe(4011);
      expect((await login('ada@example.com', '10.0.0.2')).json().code).toBe(4011);
      const limited = await login('ada@example.com', '10.0.0.3', PASSWORD);
      expect(limited.statusCode).toBe(429);
      expect(limited.json().code).toBe(4290);
      expect(limited.headers['retry-after']).toBe('30'); // the rest of the minute
      // Per IP, whatever emails it tries.
      for (const n of [1, 2, 3, 4])
        expect((await login(`u${n}@example.com`, '10.0.0.9')).json().code).toBe(4011);
      const ipLimited = await login('u5@example.com', '10.0.0.9');
      expect(ipLimited.json().code).toBe(4290);
      // Sign-ups per IP.
      const signup = (n: number) =>
        ctx.app.inject({
          method: 'POST',
          url: '/console/api/signup',
          headers: { 'x-forwarded-for': '10.0.0.20' },
          payload: { email: `s${n}@example.com`, password: PASSWORD },
        });
      expect((await signup(1)).statusCode).toBe(202);
      expect((await signup(2)).statusCode).toBe(202);
      expect((await signup(3)).json().code).toBe(4290);
    } finally {
      await ctx.app.close();
    }
  });
});

describe('console limits per IPv6 client', () => {
  it('counts the sign-ups and logins of one /64 together, and another /64 apart', async () => {
    const midMinute = Date.UTC(2026, 0, 15, 12, 30, 30);
    const ctx = await build(
      {
        loginPerIp: { perMinute: 2, perDay: 100 },
        loginPerEmail: { perMinute: 100, perDay: 100 },
        signupPerIp: { perMinute: 2, perDay: 100 },
      },
      () => midMinute,
    );
    try {
      const signup = (n: number, ip: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/console/api/signup',
          headers: { 'x-forwarded-for': ip },
          payload: { email: `v6-${n}@example.com`, password: PASSWORD },
        });
      expect((await signup(1, '2001:db8:5:6::1')).statusCode).toBe(202);
      expect((await signup(2, '2001:db8:5:6:a:b:c:d')).statusCode).toBe(202);
      expect((await signup(3, '2001:db8:5:6::ffff')).json().code).toBe(4290);
      expect((await signup(4, '2001:db8:5:7::1')).statusCode).toBe(202);
      const login = (ip: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/console/api/login',
          headers: { 'x-forwarded-for': ip },
          payload: { email: 'v6-1@example.com', password: 'wrong password!' },
        });
      expect((await login('2001:db8:9:1::1')).json().code).toBe(4011);
      expect((await login('2001:db8:9:1::2')).json().code).toBe(4011);
      expect((await login('2001:db8:9:1::3')).json().code).toBe(4290);
      expect((await login('2001:db8:9:2::3')).json().code).toBe(4011);
    } finally {
      await ctx.app.close();
    }
  });
});

describe('console emails', () => {
  it('maps look-alike emails (case, fullwidth, NFKC-equivalent) to one account', async () => {
    const ctx = await build({
      loginPerIp: { perMinute: 100, perDay: 1000 },
      loginPerEmail: { perMinute: 100, perDay: 1000 },
      signupPerIp: { perMinute: 100, perDay: 1000 },
      signupPerEmail: { perMinute: 100, perDay: 1000 },
    });
    try {
      const { body } = await signUp(ctx.app, 'Ada.Lovelace@Example.com');
      expect(body.data.account.email).toBe('ada.lovelace@example.com');
      for (const lookAlike of [
        'ADA.LOVELACE@EXAMPLE.COM',
        'ａｄａ.ｌｏｖｅｌａｃｅ＠ｅｘａｍｐｌｅ.ｃｏｍ',
        'ada.lov\u212Flace@example.com', // SCRIPT SMALL E, NFKC-equivalent to e
        '\u{1D41A}da.lovelace@example.com', // MATHEMATICAL BOLD SMALL A
        ' ada.lovelace@example.com\u00A0',
      ]) {
        const signup = await ctx.app.inject({
          method: 'POST',
          url: '/console/api/signup',
          payload: { email: lookAlike, password: PASSWORD },
        });
        // Answered as any sign-up (nothing says the address is taken); the account is left as it was.
        expect(signup.statusCode, lookAlike).toBe(202);
        expect(signup.json(), lookAlike).toEqual({
          code: 0,
          message: 'ok',
          data: { email: 'ada.lovelace@example.com', next: 'login' },
        });
        const login = await ctx.app.inject({
          method: 'POST',
          url: '/console/api/login',
          payload: { email: lookAlike, password: PASSWORD },
        });
        expect(login.statusCode, lookAlike).toBe(200);
        expect(login.json().data.account.id).toBe(body.data.account.id);
      }
      expect(await ctx.accounts.listAccounts()).toHaveLength(1);
    } finally {
      await ctx.app.close();
    }
  });

  it('refuses control and zero-width characters with 4001 and says why', async () => {
    const ctx = await build();
    try {
      for (const email of [
        'ada\u200B@example.com',
        'ada@exam\u200Dple.com',
        'ada\u0007@example.com',
        'ada@example.com\u2066',
      ]) {
        for (const url of ['/console/api/signup', '/console/api/login']) {
          const res = await ctx.app.inject({ method: 'POST', url, payload: { email, password: PASSWORD } });
          expect(res.statusCode, `${url} ${JSON.stringify(email)}`).toBe(400);
          expect(res.json().code).toBe(4001);
          expect(res.json().message).toMatch(/invisible or control character \(U\+[0-9A-F]{4}\)/);
        }
      }
      expect(await ctx.accounts.listAccounts()).toHaveLength(0);
    } finally {
      await ctx.app.close();
    }
  });
});

describe('console known devices', () => {
  const limits: ConsoleAttemptLimits = {
    loginPerIp: { perMinute: 100, perDay: 1000 },
    // A day's allowance a stranger can use up in a minute: the lock-out this design must survive.
    loginPerEmail: { perMinute: 100, perDay: 5 },
    signupPerIp: { perMinute: 100, perDay: 1000 },
    loginPerKnownDevice: { perMinute: 3, perDay: 5 },
  };
  const login = (
    app: FastifyInstance,
    ip: string,
    password: string,
    cookie?: string,
    email = 'ada@example.com',
  ) =>
    app.inject({
      method: 'POST',
      url: '/console/api/login',
      headers: { 'x-forwarded-for': ip, ...(cookie ? { cookie } : {}) },
      payload: { email, password },
    });
  /** The known-device cookie pair a response sets, and its attributes. */
  function deviceCookieOf(res: LightMyRequestResponse): { pair: string; line: string } {
    const header = res.headers['set-cookie'];
    const line = (Array.isArray(header) ? header : [header]).find((l) => l?.startsWith(`${DEVICE_COOKIE}=`));
    if (!line) throw new Error('no known-device cookie');
    return { pair: line.split(';')[0] as string, line };
  }

  it('a stranger exhausting the per-email limit stays limited; the owner’s known device still logs in', async () => {
    const ctx = await build(limits);
    try {
      await createOwner(ctx, 'ada@example.com');
      // The owner's device logs in once (day one) and keeps the cookie.
      const first = await login(ctx.app, '10.0.1.1', PASSWORD);
      expect(first.statusCode).toBe(200);
      const device = deviceCookieOf(first);
      expect(device.line).toMatch(/HttpOnly/);
      expect(device.line).toMatch(/SameSite=Strict/);
      expect(device.line).toMatch(/Path=\/console\/api\/login/);
      // A stranger guesses until the email's whole daily allowance is gone (the owner's first login
      // above had no device cookie yet, so it counted too).
      const codes: number[] = [];
      for (let i = 0; i < 6; i++)
        codes.push((await login(ctx.app, `10.0.2.${i}`, `guess number ${i}`)).json().code);
      expect(codes).toEqual([4011, 4011, 4011, 4011, 4291, 4291]);
      // The stranger stays limited, even with the right password (which they do not have, but a
      // limit that opened for the right password would be an oracle).
      expect((await login(ctx.app, '10.0.2.9', PASSWORD)).statusCode).toBe(429);
      // A new device of the owner is limited too: nobody can tell it from the stranger.
      expect((await login(ctx.app, '10.0.1.2', PASSWORD)).statusCode).toBe(429);
      // The owner's known device logs in.
      const again = await login(ctx.app, '10.0.1.1', PASSWORD, device.pair);
      expect(again.statusCode).toBe(200);
      expect(again.json().data.account.email).toBe('ada@example.com');
      // The device keeps its id.
      expect(deviceCookieOf(again).pair).toBe(device.pair);
      // ... and the stranger is still limited afterwards.
      expect((await login(ctx.app, '10.0.2.10', 'another guess!')).statusCode).toBe(429);
    } finally {
      await ctx.app.close();
    }
  });

  it('a known device has a limit of its own, and a forged or foreign device cookie counts as a stranger', async () => {
    const ctx = await build(limits);
    try {
      await createOwner(ctx, 'ada@example.com');
      await createOwner(ctx, 'eve@example.com');
      const eveDevice = deviceCookieOf(
        await login(ctx.app, '10.0.3.1', PASSWORD, undefined, 'eve@example.com'),
      );
      const adaDevice = deviceCookieOf(await login(ctx.app, '10.0.3.2', PASSWORD));
      // Eve's device cookie, or one with a made-up proof, does not make Eve's browser a known device
      // of Ada's: those attempts count against Ada's email (1 used above, 5 a day).
      const [, eveId] = /=([0-9a-f]{32})\./.exec(eveDevice.pair) ?? [];
      const forged = `${DEVICE_COOKIE}=${eveId}.${'0'.repeat(64)}`;
      const codes: number[] = [];
      for (const cookie of [eveDevice.pair, forged, eveDevice.pair, forged, eveDevice.pair])
        codes.push((await login(ctx.app, '10.0.3.1', 'a wrong guess', cookie)).json().code);
      expect(codes).toEqual([4011, 4011, 4011, 4011, 4291]);
      // Ada's known device guessing wrong is limited by the per-device limit (3 a minute).
      const own: number[] = [];
      for (let i = 0; i < 4; i++)
        own.push((await login(ctx.app, '10.0.3.2', 'wrong again!', adaDevice.pair)).json().code);
      expect(own).toEqual([4011, 4011, 4011, 4290]);
      expect((await login(ctx.app, '10.0.3.2', PASSWORD, adaDevice.pair)).statusCode).toBe(429);
    } finally {
      await ctx.app.close();
    }
  });

  it('signing up (and the login the page makes after it) makes the browser a known device too', async () => {
    const ctx = await build(limits);
    try {
      await ctx.app.inject({
        method: 'POST',
        url: '/console/api/signup',
        payload: { email: 'ada@example.com', password: PASSWORD },
      });
      const device = deviceCookieOf(await login(ctx.app, '10.0.4.100', PASSWORD));
      for (let i = 0; i < 6; i++) await login(ctx.app, `10.0.4.${i}`, `guess number ${i}`);
      expect((await login(ctx.app, '10.0.4.9', PASSWORD)).statusCode).toBe(429);
      expect((await login(ctx.app, '10.0.4.1', PASSWORD, device.pair)).statusCode).toBe(200);
    } finally {
      await ctx.app.close();
    }
  });
});

describe('console sign-up without enumeration', () => {
  const signup = (ctx: Ctx, email: string, password = PASSWORD, ip = '10.0.5.1') =>
    ctx.app.inject({
      method: 'POST',
      url: '/console/api/signup',
      headers: { 'x-forwarded-for': ip },
      payload: { email, password },
    });
  /** What a stranger sees of an answer: status, headers (but the date and the length) and body. */
  function seen(res: LightMyRequestResponse) {
    const { date: _date, 'content-length': _length, ...headers } = res.headers;
    return { status: res.statusCode, headers, body: res.json() };
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  /** The share of (a, b) pairs where a is slower: 0.5 when neither path is faster. */
  const slowerShare = (a: number[], b: number[]) =>
    a.reduce((n, x) => n + b.filter((y) => x > y).length + b.filter((y) => x === y).length / 2, 0) /
    (a.length * b.length);

  it('answers a sign-up for an existing email (any case) exactly as for a new one, after the same work', async () => {
    // Production's scrypt cost: the timing below compares the real work of both paths.
    const generous = { perMinute: 1000, perDay: 10_000 };
    const ctx = await build(
      { loginPerIp: generous, loginPerEmail: generous, signupPerIp: generous, signupPerEmail: generous },
      undefined,
      { scrypt: DEFAULT_SCRYPT },
    );
    try {
      await createOwner(ctx, 'ada@example.com');
      const fresh: number[] = [];
      const taken: number[] = [];
      const cheap: number[] = [];
      const ROUNDS = 12;
      for (let i = 0; i < ROUNDS; i++) {
        // Interleaved, so the machine's load weighs on both alike.
        let t = performance.now();
        const a = await signup(ctx, `new${i}@example.com`);
        fresh.push(performance.now() - t);
        t = performance.now();
        const b = await signup(ctx, i % 2 ? 'ADA@EXAMPLE.COM' : 'ada@example.com', `another password ${i}`);
        taken.push(performance.now() - t);
        // The control: an answer that skips the password hashing (too short a password).
        t = performance.now();
        await signup(ctx, `new${i}@example.com`, 'short');
        cheap.push(performance.now() - t);
        const forNew = seen(a);
        const forTaken = seen(b);
        expect(forNew.body.data.email).toBe(`new${i}@example.com`);
        expect(forTaken.body.data.email).toBe('ada@example.com');
        forNew.body.data.email = forTaken.body.data.email = '<email>';
        expect(forTaken).toEqual(forNew);
        expect(forNew.status).toBe(202);
        expect(forNew.headers['set-cookie']).toBeUndefined();
      }
      const share = slowerShare(taken, fresh);
      const ratio = median(taken) / median(fresh);
      console.log(
        `sign-up timing (ms, median): new ${median(fresh).toFixed(1)}, existing ${median(taken).toFixed(1)} (ratio ${ratio.toFixed(2)}, existing slower in ${(share * 100).toFixed(0)}% of pairs); no hashing ${median(cheap).toFixed(1)}`,
      );
      // The same comparison tells a path without the hashing apart at once; both sign-up paths it does not.
      expect(slowerShare(cheap, fresh)).toBeLessThan(0.1);
      expect(share).toBeGreaterThan(0.1);
      expect(share).toBeLessThan(0.9);
      expect(ratio).toBeGreaterThan(0.5);
      expect(ratio).toBeLessThan(2);
      // Nothing of the existing account changed.
      expect(
        await verifyPassword(
          PASSWORD,
          (await ctx.accounts.findAccountByEmail('ada@example.com'))?.passwordHash ?? '',
        ),
      ).toBe(true);
      expect(await ctx.accounts.listAccounts()).toHaveLength(ROUNDS + 1);
    } finally {
      await ctx.app.close();
    }
  }, 60_000);

  it('the owner signing up again (any case) is logged in by the password; a stranger’s login fails as any other', async () => {
    const ctx = await build();
    try {
      const owner = await createOwner(ctx, 'ada@example.com');
      expect((await signup(ctx, 'ADA@Example.com')).statusCode).toBe(202);
      const login = (password: string) =>
        ctx.app.inject({
          method: 'POST',
          url: '/console/api/login',
          payload: { email: 'ADA@Example.com', password },
        });
      const ownerLogin = await login(PASSWORD);
      expect(ownerLogin.statusCode).toBe(200);
      expect(ownerLogin.json().data.account.id).toBe(owner.id);
      expect((await signup(ctx, 'ada@example.com', 'a stranger’s password')).statusCode).toBe(202);
      const stranger = await login('a stranger’s password');
      expect(stranger.statusCode).toBe(401);
      expect(stranger.json()).toEqual({ code: 4011, message: 'Wrong email or password' });
      // The same answer as a login for an address nobody has.
      const nobody = await ctx.app.inject({
        method: 'POST',
        url: '/console/api/login',
        payload: { email: 'nobody@example.com', password: 'a stranger’s password' },
      });
      expect(nobody.json()).toEqual(stranger.json());
      expect(await ctx.accounts.listAccounts()).toHaveLength(1);
    } finally {
      await ctx.app.close();
    }
  });

  it('bounds sign-ups from every address together (SIGNUP_PER_MINUTE / SIGNUP_PER_DAY), new and existing emails alike', async () => {
    const midMinute = Date.UTC(2026, 0, 15, 12, 30, 30);
    const perMinute = await build(undefined, () => midMinute, { signupTotal: { perMinute: 3, perDay: 100 } });
    try {
      await createOwner(perMinute, 'ada@example.com');
      for (let i = 0; i < 3; i++)
        expect((await signup(perMinute, `n${i}@example.com`, PASSWORD, `10.${i}.6.1`)).statusCode).toBe(202);
      for (const email of ['n9@example.com', 'ada@example.com']) {
        const refused = await signup(perMinute, email, PASSWORD, '10.99.6.50');
        expect(refused.statusCode, email).toBe(429);
        expect(refused.json(), email).toEqual({
          code: 4290,
          message: 'Too many sign-ups on this service right now (from everyone); try again later',
        });
        expect(refused.headers['retry-after']).toBe('30');
      }
      expect(await perMinute.accounts.listAccounts()).toHaveLength(4);
    } finally {
      await perMinute.app.close();
    }
    const perDay = await build(undefined, () => midMinute, { signupTotal: { perMinute: 100, perDay: 2 } });
    try {
      for (let i = 0; i < 2; i++)
        expect((await signup(perDay, `d${i}@example.com`, PASSWORD, `10.${i}.7.1`)).statusCode).toBe(202);
      const refused = await signup(perDay, 'd9@example.com', PASSWORD, '10.0.7.9');
      expect(refused.json().code).toBe(4291);
      expect(Number(refused.headers['retry-after'])).toBe(11.5 * 3600 - 30);
    } finally {
      await perDay.app.close();
    }
  });
});

describe('passwords', () => {
  it('verifies a hash made elsewhere: scrypt of the NFKC form, parameters and salt in the record', async () => {
    // python3: hashlib.scrypt(unicodedata.normalize('NFKC', 'pässwörd 123').encode(),
    //   salt=bytes(range(16)), n=1024, r=8, p=1, dklen=32), salt and key in base64
    const stored = 'scrypt$1024$8$1$AAECAwQFBgcICQoLDA0ODw==$kCyngQUMtlvhMBXiYA78A66wmaEgJ2c+zYRZ7Rw4gQ8=';
    expect(await verifyPassword('pässwörd 123', stored)).toBe(true);
    // Fullwidth ｐ and a decomposed ö (o + U+0308) have that NFKC form too.
    expect(await verifyPassword('\uff50a\u0308sswo\u0308rd 123', stored)).toBe(true);
    expect(await verifyPassword('passwörd 123', stored)).toBe(false);
  });

  it('verifies only the right password and rejects malformed stored hashes', async () => {
    const stored = await hashPassword('pässwörd 123', FAST_SCRYPT);
    expect(await verifyPassword('pässwörd 123', stored)).toBe(true);
    expect(await verifyPassword('passwörd 123', stored)).toBe(false);
    for (const bad of [
      '',
      'scrypt$',
      stored.replace(/\$1024\$/, '$1000$'),
      stored.replace(/\$1024\$/, '$1073741824$'),
    ])
      expect(await verifyPassword('pässwörd 123', bad)).toBe(false);
  });
});
