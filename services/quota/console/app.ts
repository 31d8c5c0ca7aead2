// The product console (spec 5.5): sign up, log in, API keys (create → secret shown once; list; revoke)
// and today's usage of the account. A Fastify plugin: the page and its assets under /console, a JSON
// API under /console/api. Plain HTML/CSS/JS read once at start; no front-end build.
//
// Security:
// - passwords: scrypt, per-user salt, constant-time compare (passwords.ts);
// - session: random token in a cookie `HttpOnly; SameSite=Strict; Path=/console` (+ `Secure` on https);
//   the store keeps only its hash (cookies.ts);
// - CSRF: SameSite=Strict, an Origin / Sec-Fetch-Site check on every state-changing request, JSON-only
//   bodies (no HTML form can send one cross-site), and a per-session token derived from the session
//   token (HMAC), required in `X-CSRF-Token` on every state-changing request of a logged-in user
//   (csrf.ts);
// - login attempts limited per client IP and per email, sign-ups per IP, per email and in total (every
//   address together: SIGNUP_PER_MINUTE / SIGNUP_PER_DAY), through the QuotaStore (so the limits hold
//   across replicas on Redis). The total is shared out per network (SIGNUP_NETWORK_SHARE_PERCENT of it
//   at most for one IPv4 /24 or IPv6 /48: shared-budget.ts), and a sign-up of an email that already
//   has an account gives its part of the total back (it created nothing), so that no one network, and
//   no one repeating an existing email, can use up everyone's sign-ups. A device that has logged in to the account before carries a
//   "known device" cookie signed with the account's password hash: its attempts count against a limit
//   of their own instead of the per-email one, so a stranger guessing can exhaust the email's limit
//   (and stays limited) without locking the owner out of their own devices (known-device.ts);
// - emails normalised (NFKC, case-folded, trimmed) and refused when they hold invisible or control
//   characters (account-store.ts), so nobody can hold look-alike accounts;
// - no enumeration: a sign-up answers the same (status, body, headers, the same scrypt work) whether
//   the email was free or already had an account, and logs nobody in; the console then logs in with
//   the same email and password, which succeeds for the new account and for the owner of an existing
//   one, and answers a stranger as every failed login does (docs/accounts-store.md).
// Every JSON error is an ApiError of the common table: 4001 bad input, 4011 not logged in / bad
// credentials / missing CSRF proof, 4290/4291 too many attempts, 5001 store down.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type NetworkPrefixes, networkKey } from '../../../lib/common/client-key.ts';
import { describeOnly } from '../../../lib/common/describe-only.ts';
import { ok } from '../../../lib/common/envelope.ts';
import { ApiError } from '../../../lib/common/errors.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';
import type { WindowLimits } from '../../../lib/policy/rules.ts';
import {
  type Account,
  type AccountStore,
  type AccountTier,
  type ApiKeyRecord,
  EmailTakenError,
  emailProblem,
  InvalidEmailError,
  KeyLimitError,
  keyNameProblem,
  normaliseEmail,
  normaliseKeyName,
  type SessionStore,
  StoreWriteError,
} from '../accounts/account-store.ts';
import { maskedKey, sha256Hex } from '../accounts/api-keys.ts';
import { keySubject } from '../authorize.ts';
import type { QuotaStore } from '../quota-store.ts';
import type { SharedBudgetStore } from '../shared-budget.ts';
import { readCookie, SESSION_COOKIE, sessionCookie } from './cookies.ts';
import { assertCsrfToken, assertSameOrigin, csrfToken } from './csrf.ts';
import { deviceCookie, knownDevice } from './known-device.ts';
import {
  burnPasswordCheck,
  DEFAULT_SCRYPT,
  hashPassword,
  PASSWORD_MAX,
  PASSWORD_MIN,
  passwordProblem,
  type ScryptParams,
  verifyPassword,
} from './passwords.ts';
import {
  changePasswordSchema,
  createKeySchema,
  listKeysSchema,
  loginSchema,
  logoutSchema,
  revokeKeySchema,
  sessionSchema,
  signupSchema,
  usageHistorySchema,
  usageSchema,
} from './schemas.ts';

export interface ConsoleAttemptLimits {
  /** Login attempts per client IP. */
  loginPerIp: WindowLimits;
  /** Login attempts per email address (whoever tries it). */
  loginPerEmail: WindowLimits;
  /** Account creations per client IP. */
  signupPerIp: WindowLimits;
  /**
   * Sign-ups per email, new or existing (the bound on repeating an email, which takes nothing from the
   * total). Default: DEFAULT_ATTEMPT_LIMITS.signupPerEmail.
   */
  signupPerEmail?: WindowLimits;
  /**
   * Login attempts per known device (one that has logged in to the account before); its attempts do
   * not count against `loginPerEmail`. Default: DEFAULT_ATTEMPT_LIMITS.loginPerKnownDevice.
   */
  loginPerKnownDevice?: WindowLimits;
}

export const DEFAULT_ATTEMPT_LIMITS: ConsoleAttemptLimits = {
  loginPerIp: { perMinute: 10, perDay: 200 },
  loginPerEmail: { perMinute: 5, perDay: 50 },
  signupPerIp: { perMinute: 5, perDay: 20 },
  signupPerEmail: { perMinute: 3, perDay: 10 },
  loginPerKnownDevice: { perMinute: 5, perDay: 50 },
};

export interface ConsoleOptions {
  accounts: AccountStore;
  sessions: SessionStore;
  quotaStore: QuotaStore & SharedBudgetStore;
  /** The limits authorize applies to each account tier (the usage panel shows them); read per request. */
  accountLimits: Record<AccountTier, WindowLimits> | (() => Record<AccountTier, WindowLimits>);
  /** The QuotaStore subject authorize counts an account's requests under. */
  accountSubject: (accountId: string) => string;
  attemptLimits?: ConsoleAttemptLimits;
  sessionTtlMs?: number;
  /** Sign-ups from every address together (SIGNUP_PER_MINUTE, SIGNUP_PER_DAY). */
  signupTotal: WindowLimits;
  /** The most of signupTotal one network may take (SIGNUP_NETWORK_SHARE_PERCENT). */
  signupNetworkSharePercent?: number;
  /** What one network is (NETWORK_IPV4_PREFIX_LENGTH, NETWORK_IPV6_PREFIX_LENGTH). */
  networkPrefixes?: NetworkPrefixes;
  /** Tests lower the scrypt cost; production uses DEFAULT_SCRYPT. */
  scrypt?: ScryptParams;
  /** Active (unrevoked) keys an account may hold at once. */
  maxActiveKeys?: number;
}

/** The tier limits in force now (a policy change shows on the next request). */
function limitsOf(opts: ConsoleOptions): Record<AccountTier, WindowLimits> {
  return typeof opts.accountLimits === 'function' ? opts.accountLimits() : opts.accountLimits;
}

/** `<device id: 32 hex>.<HMAC-SHA256 of account id + device id, keyed by the password hash>`. */
const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
const MAX_ACTIVE_KEYS = 20;
const EMAIL_MAX = 254;
const KEY_NAME_MAX = 64;
/** Every console JSON body (credentials, a key name) fits in far less. */
const CONSOLE_BODY_BYTES = 16 * 1024;
const EMAIL_FORMAT = /^[^\s@]+@[^\s@.]+(\.[^\s@.]+)+$/;
const TOKEN_FORMAT = /^[0-9a-f]{64}$/;
const KEY_ID_FORMAT = /^key_[0-9a-f]{16}$/;

const STATIC_DIR = new URL('./static/', import.meta.url);
const require = createRequire(import.meta.url);
/** Days the usage chart shows, today included. */
export const USAGE_HISTORY_DAYS = 30;

/** Response headers of every console response: no framing, no sniffing, no caching, no referrer. */
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

interface LoggedIn {
  account: Account;
  token: string;
}

export default async function consoleApp(app: FastifyInstance, opts: ConsoleOptions): Promise<void> {
  const limits = opts.attemptLimits ?? DEFAULT_ATTEMPT_LIMITS;
  const ttlMs = opts.sessionTtlMs ?? SESSION_TTL_MS;
  const scryptParams = opts.scrypt ?? DEFAULT_SCRYPT;
  const sharePercent = opts.signupNetworkSharePercent ?? SETTINGS.SIGNUP_NETWORK_SHARE_PERCENT.default;
  const networkPrefixes = opts.networkPrefixes ?? {
    ipv4: SETTINGS.NETWORK_IPV4_PREFIX_LENGTH.default,
    ipv6: SETTINGS.NETWORK_IPV6_PREFIX_LENGTH.default,
  };
  const maxActiveKeys = opts.maxActiveKeys ?? MAX_ACTIVE_KEYS;
  const assets = {
    // The chart library, served from this origin (the CSP allows no other): uPlot, small and kept.
    uplotJs: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js')),
    uplotCss: readFileSync(require.resolve('uplot/dist/uPlot.min.css')),
    html: readFileSync(new URL('index.html', STATIC_DIR)),
    css: readFileSync(new URL('console.css', STATIC_DIR)),
    js: readFileSync(new URL('console.js', STATIC_DIR)),
  };

  // This plugin's context only: JSON bodies and nothing else (no text/plain, which a cross-site HTML
  // form could send), small.
  app.removeContentTypeParser('text/plain');
  app.addHook('onSend', async (_request, reply) => {
    reply.headers(SECURITY_HEADERS);
  });

  // ---- page and assets -------------------------------------------------------------------------
  const page = (_request: FastifyRequest, reply: FastifyReply) =>
    reply.type('text/html; charset=utf-8').send(assets.html);
  app.get('/console', page);
  app.get('/console/', page);
  app.get('/console/assets/console.css', (_request, reply) =>
    reply.type('text/css; charset=utf-8').send(assets.css),
  );
  app.get('/console/assets/uplot.js', (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').send(assets.uplotJs),
  );
  app.get('/console/assets/uplot.css', (_request, reply) =>
    reply.type('text/css; charset=utf-8').send(assets.uplotCss),
  );
  app.get('/console/assets/console.js', (_request, reply) =>
    reply.type('text/javascript; charset=utf-8').send(assets.js),
  );

  // ---- helpers ---------------------------------------------------------------------------------
  async function limit(subject: string, windowLimits: WindowLimits, what: string): Promise<void> {
    const outcome = await opts.quotaStore.consume(subject, windowLimits);
    if (outcome.allowed) return;
    throw new ApiError(
      outcome.refusedBy === 'day' ? 'DAILY_QUOTA' : 'RATE_LIMITED',
      `Too many ${what}; try again later`,
      { 'retry-after': String(outcome.retryAfterSeconds) },
    );
  }

  async function currentSession(request: FastifyRequest): Promise<LoggedIn | undefined> {
    const token = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (!token || !TOKEN_FORMAT.test(token)) return undefined;
    const session = await opts.sessions.resolveSession(token);
    if (!session) return undefined;
    const account = await opts.accounts.getAccount(session.accountId);
    return account ? { account, token } : undefined;
  }

  async function requireSession(request: FastifyRequest): Promise<LoggedIn> {
    const loggedIn = await currentSession(request);
    if (!loggedIn) throw new ApiError('INVALID_API_KEY', 'Not logged in');
    return loggedIn;
  }

  /** For state-changing requests of a logged-in user: same origin and the session's CSRF token. */
  async function requireWrite(request: FastifyRequest): Promise<LoggedIn> {
    assertSameOrigin(request);
    const loggedIn = await requireSession(request);
    assertCsrfToken(request, loggedIn.token);
    return loggedIn;
  }

  async function startSession(reply: FastifyReply, request: FastifyRequest, account: Account) {
    // A fresh token on every login (no session fixation); the previous one, if any, ends.
    const previous = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (previous && TOKEN_FORMAT.test(previous)) await opts.sessions.deleteSession(previous);
    const { token } = await opts.sessions.createSession(account.id, ttlMs);
    const secure = request.protocol === 'https';
    reply.header('set-cookie', [
      sessionCookie(token, Math.floor(ttlMs / 1000), secure),
      deviceCookie(request, account, secure),
    ]);
    return sessionView(account, token);
  }

  // This plugin's failures, translated before the root's envelope handler (which gets what is thrown
  // here): a body over the console's own limit says that limit (not the detect endpoint's 50 MB), and
  // a write the store did not save says so.
  app.setErrorHandler(async (err: unknown) => {
    if ((err as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE')
      throw new ApiError('BAD_REQUEST', `Request body too large: the limit is ${CONSOLE_BODY_BYTES} bytes`, {
        connection: 'close',
      });
    if (err instanceof StoreWriteError)
      throw new ApiError(
        'UNAVAILABLE',
        'The change was not saved (the account store refused the write); nothing was changed, try again later',
        { 'retry-after': '5' },
        err,
      );
    throw err;
  });

  // ---- JSON API (schemas.ts) ----------------------------------------------------------------------
  const read = <S extends object>(schema: S) => ({ schema, validatorCompiler: describeOnly });
  const write = <S extends object>(schema: S) => ({ ...read(schema), bodyLimit: CONSOLE_BODY_BYTES });

  // The same answer, after the same work, whether the email was free or not: 202 and no session. The
  // console logs in next (see the file's header); an existing account is left as it was.
  app.post('/console/api/signup', write(signupSchema), async (request, reply) => {
    assertSameOrigin(request);
    const { email, password } = credentials(request.body);
    if (password.length < PASSWORD_MIN)
      throw new ApiError('BAD_REQUEST', `Use a password of at least ${PASSWORD_MIN} characters`);
    await limit(`console:signup:ip:${request.clientKey}`, limits.signupPerIp, 'sign-ups from this address');
    await limit(
      `console:signup:email:${sha256Hex(email)}`,
      limits.signupPerEmail ?? DEFAULT_SIGNUP_PER_EMAIL,
      'sign-ups for this email',
    );
    const passwordHash = await hashPassword(password, scryptParams);
    // The total and this network's share of it, both or neither; given back when nothing was created.
    const network = networkKey(request.ip, networkPrefixes);
    const taken = await opts.quotaStore.consumeShare(
      SIGNUP_TOTAL_SUBJECT,
      network,
      opts.signupTotal,
      sharePercent,
    );
    if (!taken.allowed) {
      const what =
        taken.refusedByBound === 'share'
          ? 'sign-ups from your network right now'
          : 'sign-ups on this service right now (from everyone)';
      throw new ApiError(
        taken.refusedBy === 'day' ? 'DAILY_QUOTA' : 'RATE_LIMITED',
        `Too many ${what}; try again later`,
        { 'retry-after': String(taken.retryAfterSeconds) },
      );
    }
    let created = false;
    try {
      await opts.accounts.createAccount({ email, tier: 'free', passwordHash });
      created = true;
    } catch (err) {
      if (err instanceof InvalidEmailError) throw new ApiError('BAD_REQUEST', err.message);
      if (!(err instanceof EmailTakenError)) throw err;
    } finally {
      if (!created && taken.charge) await opts.quotaStore.refundShare(taken.charge);
    }
    reply.code(202);
    return ok({ email, next: 'login' });
  });

  app.post('/console/api/login', write(loginSchema), async (request, reply) => {
    assertSameOrigin(request);
    const { email, password } = credentials(request.body);
    await limit(
      `console:login:ip:${request.clientKey}`,
      limits.loginPerIp,
      'login attempts from this address',
    );
    const account = await opts.accounts.findAccountByEmail(email);
    // A device that has logged in to this account before has its own limit (so a stranger exhausting
    // the email's limit cannot lock the owner out); every other attempt counts against the email.
    const device = account && knownDevice(request, account);
    if (device) {
      await limit(
        `console:login:device:${device}`,
        limits.loginPerKnownDevice ?? DEFAULT_LOGIN_PER_KNOWN_DEVICE,
        'login attempts from this device',
      );
    } else {
      await limit(
        `console:login:email:${sha256Hex(email)}`,
        limits.loginPerEmail,
        'login attempts for this account',
      );
    }
    const valid = account ? await verifyPassword(password, account.passwordHash) : await burn(password);
    if (!account || !valid) throw new ApiError('INVALID_API_KEY', 'Wrong email or password');
    return ok(await startSession(reply, request, account));
  });

  // The current password proves it is the owner, not someone at an unlocked screen; its attempts count
  // as login attempts from this address. The new hash re-signs this device's known-device cookie.
  app.post('/console/api/password', write(changePasswordSchema), async (request, reply) => {
    const { account } = await requireWrite(request);
    const { current, password } = passwordChange(request.body);
    await limit(
      `console:login:ip:${request.clientKey}`,
      limits.loginPerIp,
      'password attempts from this address',
    );
    if (!(await verifyPassword(current, account.passwordHash)))
      throw new ApiError('BAD_REQUEST', 'The current password is wrong');
    const updated = await opts.accounts.setPasswordHash(
      account.id,
      await hashPassword(password, scryptParams),
    );
    if (!updated) throw new ApiError('INVALID_API_KEY', 'Not logged in');
    reply.header('set-cookie', deviceCookie(request, updated, request.protocol === 'https'));
    return ok({ changed: true });
  });

  app.post('/console/api/logout', write(logoutSchema), async (request, reply) => {
    const { token } = await requireWrite(request);
    await opts.sessions.deleteSession(token);
    reply.header('set-cookie', sessionCookie('', 0, request.protocol === 'https'));
    return ok({ loggedOut: true });
  });

  app.get('/console/api/session', read(sessionSchema), async (request) => {
    const { account, token } = await requireSession(request);
    return ok(sessionView(account, token));
  });

  app.get('/console/api/usage', read(usageSchema), async (request) => {
    const { account } = await requireSession(request);
    const tierLimits = limitsOf(opts)[account.tier];
    const { minute, day } = await opts.quotaStore.peek(opts.accountSubject(account.id), tierLimits);
    const view = (w: { used: number; limit: number; resetAt: number }) => ({
      used: w.used,
      limit: w.limit,
      remaining: Math.max(0, w.limit - w.used),
      resetAt: w.resetAt,
    });
    return ok({ tier: account.tier, day: view(day), minute: view(minute) });
  });

  // Served and refused requests per UTC day, of the account or (?key=<id>) of one of its keys.
  app.get<{ Querystring: { key?: string } }>(
    '/console/api/usage/history',
    read(usageHistorySchema),
    async (request) => {
      const { account } = await requireSession(request);
      const keyId = request.query.key;
      let subject = opts.accountSubject(account.id);
      if (keyId !== undefined && keyId !== '') {
        const keys = await opts.accounts.listKeys(account.id);
        if (!KEY_ID_FORMAT.test(keyId) || !keys.some((k) => k.id === keyId))
          throw new ApiError('NOT_FOUND', `No key ${keyId} in this account`);
        subject = keySubject(account.id, keyId);
      }
      const days = await opts.quotaStore.history(subject, USAGE_HISTORY_DAYS);
      return ok({ key: keyId || null, dailyLimit: limitsOf(opts)[account.tier].perDay, days });
    },
  );

  app.get('/console/api/keys', read(listKeysSchema), async (request) => {
    const { account } = await requireSession(request);
    const keys = await opts.accounts.listKeys(account.id);
    return ok({ keys: keys.map(keyView) });
  });

  app.post('/console/api/keys', write(createKeySchema), async (request, reply) => {
    const { account } = await requireWrite(request);
    const name = keyName(request.body);
    // Counted and created in one atomic step by the store: concurrent creations cannot pass the limit.
    let created: Awaited<ReturnType<AccountStore['createKey']>>;
    try {
      created = await opts.accounts.createKey(account.id, { name, maxActive: maxActiveKeys });
    } catch (err) {
      if (err instanceof KeyLimitError) throw new ApiError('BAD_REQUEST', err.message);
      throw err;
    }
    if (!created) throw new ApiError('INVALID_API_KEY', 'Not logged in');
    reply.code(201);
    return ok({ key: keyView(created.record), secret: created.secret });
  });

  app.post<{ Params: { id: string } }>(
    '/console/api/keys/:id/revoke',
    write(revokeKeySchema),
    async (request) => {
      const { account } = await requireWrite(request);
      const { id } = request.params;
      const revoked = KEY_ID_FORMAT.test(id) ? await opts.accounts.revokeKey(id, account.id) : undefined;
      if (!revoked) throw new ApiError('BAD_REQUEST', 'No such key in this account');
      return ok({ key: keyView(revoked) });
    },
  );
}

// ---- pure helpers ----------------------------------------------------------------------------------

const DEFAULT_LOGIN_PER_KNOWN_DEVICE = DEFAULT_ATTEMPT_LIMITS.loginPerKnownDevice as WindowLimits;
const DEFAULT_SIGNUP_PER_EMAIL = DEFAULT_ATTEMPT_LIMITS.signupPerEmail as WindowLimits;
/** The QuotaStore subject counting every sign-up, whatever its address. */
export const SIGNUP_TOTAL_SUBJECT = 'console:signup:all';

async function burn(password: string): Promise<false> {
  await burnPasswordCheck(password);
  return false;
}

function sessionView(account: Account, token: string) {
  return {
    account: { id: account.id, email: account.email, tier: account.tier, createdAt: account.createdAt },
    csrfToken: csrfToken(token),
  };
}

function keyView(key: ApiKeyRecord) {
  return {
    id: key.id,
    name: key.name,
    masked: maskedKey(key),
    createdAt: key.createdAt,
    lastUsedAt: key.lastUsedAt,
    revokedAt: key.revokedAt,
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function credentials(body: unknown): { email: string; password: string } {
  if (!isRecord(body)) throw new ApiError('BAD_REQUEST', 'Send a JSON object with email and password');
  const { email, password } = body;
  if (typeof email !== 'string' || normaliseEmail(email) === '')
    throw new ApiError('BAD_REQUEST', 'Enter your email');
  if (typeof password !== 'string' || password === '')
    throw new ApiError('BAD_REQUEST', 'Enter your password');
  if (email.length > EMAIL_MAX) throw new ApiError('BAD_REQUEST', 'Email address too long');
  if (password.length > PASSWORD_MAX)
    throw new ApiError('BAD_REQUEST', `Use a password of at most ${PASSWORD_MAX} characters`);
  const problem = emailProblem(email);
  if (problem) throw new ApiError('BAD_REQUEST', problem);
  const normalised = normaliseEmail(email);
  // NFKC can lengthen text (one ligature or square symbol becomes several letters).
  if (normalised.length > EMAIL_MAX) throw new ApiError('BAD_REQUEST', 'Email address too long');
  if (!EMAIL_FORMAT.test(normalised)) throw new ApiError('BAD_REQUEST', 'Enter a valid email address');
  return { email: normalised, password };
}

function passwordChange(body: unknown): { current: string; password: string } {
  if (!isRecord(body)) throw new ApiError('BAD_REQUEST', 'Send a JSON object with current and password');
  const { current, password } = body;
  if (typeof current !== 'string' || current === '')
    throw new ApiError('BAD_REQUEST', 'Enter your current password');
  if (current.length > PASSWORD_MAX) throw new ApiError('BAD_REQUEST', 'The current password is wrong');
  if (typeof password !== 'string') throw new ApiError('BAD_REQUEST', 'Enter a new password');
  const problem = passwordProblem(password);
  if (problem) throw new ApiError('BAD_REQUEST', problem);
  return { current, password };
}

function keyName(body: unknown): string {
  if (body === undefined || body === null) return '';
  if (!isRecord(body)) throw new ApiError('BAD_REQUEST', 'Send a JSON object');
  const { name } = body;
  if (name === undefined || name === null) return '';
  if (typeof name !== 'string') throw new ApiError('BAD_REQUEST', 'The key name must be text');
  // Refused like emails (controls, bidi overrides, zero-width characters, lone surrogates): a listing
  // must show what was typed, and no name may reorder or hide the text around it.
  const problem = keyNameProblem(name);
  if (problem) throw new ApiError('BAD_REQUEST', problem);
  const normalised = normaliseKeyName(name);
  if (normalised.length > KEY_NAME_MAX)
    throw new ApiError('BAD_REQUEST', `Key names are at most ${KEY_NAME_MAX} characters`);
  return normalised;
}
