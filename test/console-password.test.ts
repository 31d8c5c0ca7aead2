// Passwords that can be set and changed: `npm run admin -- set-password` gives an account made by the
// admin CLI (no password: no console login) a password it then logs in with, read from stdin and never
// from argv; a logged-in user changes their own on the console (CSRF-checked, the current password
// required), after which only the new one logs in.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { decorateClientKey } from '../lib/common/client-key.ts';
import { installEnvelopeHandlers } from '../lib/common/envelope.ts';
import type { AccountStore, SessionStore } from '../services/quota/accounts/account-store.ts';
import { accountSubject } from '../services/quota/authorize.ts';
import consoleApp from '../services/quota/console/app.ts';
import { readCookie, SESSION_COOKIE } from '../services/quota/console/cookies.ts';
import { MemoryQuotaStore } from '../services/quota/stores/memory-quota-store.ts';
import { openSqliteAccountStore } from '../services/quota/stores/sqlite-account-store.ts';
import { childEnv } from './support/children.ts';
import { ROOT } from './support/server-process.ts';

const FAST_SCRYPT = { N: 2 ** 10, r: 8, p: 1 };
const TIERS = { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } };
const ORIGIN = { origin: 'http://localhost', host: 'localhost' };

const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-password-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let open: Array<{ close(): Promise<unknown> }> = [];
afterEach(async () => {
  await Promise.all(open.map((o) => o.close()));
  open = [];
});

interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

function admin(env: Record<string, string>, stdin: string, ...args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      ['--import', 'tsx', 'services/admin/cli.ts', ...args],
      { cwd: ROOT, env: childEnv({ ...process.env, TSX_DISABLE_CACHE: '1', ...env }) },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    child.stdin?.end(stdin);
  });
}

async function consoleOn(store: AccountStore & SessionStore): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  decorateClientKey(app);
  installEnvelopeHandlers(app);
  await app.register(consoleApp, {
    accounts: store,
    sessions: store,
    quotaStore: new MemoryQuotaStore(),
    accountLimits: TIERS,
    accountSubject,
    scrypt: FAST_SCRYPT,
    signupTotal: { perMinute: 1000, perDay: 10_000 },
  });
  await app.ready();
  open.push(app);
  return app;
}

function login(app: FastifyInstance, email: string, password: string) {
  return app.inject({
    method: 'POST',
    url: '/console/api/login',
    headers: ORIGIN,
    payload: { email, password },
  });
}

describe('npm run admin -- set-password', () => {
  const env = { ACCOUNTS_FILE: join(dir, 'accounts.db') };

  it('gives a CLI-made account a password from stdin, which then logs in to the console', async () => {
    const created = await admin(env, '', 'create-account', '--email', 'cli@example.com');
    expect(created.code, created.stderr).toBe(0);

    const before = openSqliteAccountStore(env.ACCOUNTS_FILE);
    open.push(before);
    expect((await login(await consoleOn(before), 'cli@example.com', 'a long new password')).statusCode).toBe(
      401,
    );

    const set = await admin(env, 'a long new password\n', 'set-password', 'cli@example.com');
    expect(set, set.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(set.stdout).toMatch(
      /^set the console password of acc_\w+ <cli@example\.com>: it can log in to the console\n$/,
    );
    expect(set.stdout).not.toContain('a long new password');

    const after = openSqliteAccountStore(env.ACCOUNTS_FILE);
    open.push(after);
    const app = await consoleOn(after);
    expect((await login(app, 'cli@example.com', 'a long new password')).statusCode).toBe(200);
    expect((await login(app, 'cli@example.com', 'another password')).statusCode).toBe(401);

    const listed = await admin(env, '', 'list-accounts', '--json');
    expect(JSON.parse(listed.stdout).accounts[0]).toMatchObject({
      email: 'cli@example.com',
      consoleLogin: true,
    });
  }, 60_000);

  it.each([
    ['short\n', 'Use a password of at least 10 characters'],
    ['', 'no password on stdin (pipe it in, or run in a terminal to be asked)'],
  ])(
    'refuses %j with one line and exit 2',
    async (stdin, message) => {
      await admin(env, '', 'create-account', '--email', 'short@example.com');
      const result = await admin(env, stdin, 'set-password', 'short@example.com');
      expect(result.code).toBe(2);
      expect(result.stderr.split('\n')[0]).toBe(message);
    },
    60_000,
  );

  it('names an unknown account, exit 1', async () => {
    const result = await admin(env, 'a long new password\n', 'set-password', 'nobody@example.com');
    expect(result).toMatchObject({ code: 1, stderr: 'no account nobody@example.com\n' });
  }, 60_000);
});

describe('the console: change password', () => {
  it('needs the session, its CSRF token and the current password; then only the new one logs in', async () => {
    const store = openSqliteAccountStore(join(dir, 'console.db'));
    open.push(store);
    const app = await consoleOn(store);
    const email = 'ada@example.com';
    const signup = await app.inject({
      method: 'POST',
      url: '/console/api/signup',
      headers: ORIGIN,
      payload: { email, password: 'first password here' },
    });
    expect(signup.statusCode).toBe(202);
    const session = await login(app, email, 'first password here');
    const setCookie = session.headers['set-cookie'];
    const line = (Array.isArray(setCookie) ? setCookie[0] : setCookie) ?? '';
    const cookie = `${SESSION_COOKIE}=${readCookie(line.split(';')[0], SESSION_COOKIE)}`;
    const csrf = session.json().data.csrfToken as string;
    const change = (payload: object, headers: Record<string, string> = { 'x-csrf-token': csrf }) =>
      app.inject({
        method: 'POST',
        url: '/console/api/password',
        headers: { ...ORIGIN, cookie, ...headers },
        payload,
      });

    expect(
      (await change({ current: 'first password here', password: 'second password!' }, {})).statusCode,
    ).toBe(401);
    const wrong = await change({ current: 'not my password', password: 'second password!' });
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json()).toEqual({ code: 4001, message: 'The current password is wrong' });
    const short = await change({ current: 'first password here', password: 'short' });
    expect(short.json()).toEqual({ code: 4001, message: 'Use a password of at least 10 characters' });

    const changed = await change({ current: 'first password here', password: 'second password!' });
    expect(changed.statusCode).toBe(200);
    expect(changed.json()).toEqual({ code: 0, message: 'ok', data: { changed: true } });
    expect((await login(app, email, 'first password here')).statusCode).toBe(401);
    expect((await login(app, email, 'second password!')).statusCode).toBe(200);
  });
});
