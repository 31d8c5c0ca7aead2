// The console in a real headless Chromium (Debian's, driven by playwright-core) against the real
// server process: sign up → create a key (secret shown once) → call /api/open/detect with it → usage
// moves → revoke → the key gets 401/4011; signing up again with the same email signs in only its owner. Runs on the embedded accounts file, and again on a real
// redis-server (REDIS_URL) when one is installed. Leaves test-artifacts/console.png (and
// console-redis.png) for a human to look at.
//
// Chromium missing: fails under CI=true, otherwise skipped with the install command.

import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fixture } from '../fixtures/corpus.ts';
import {
  type ConsoleBrowser,
  consoleTools,
  STORE_KINDS,
  type StoreKind,
  signUp,
  startConsoleBrowser,
} from '../support/console-browser.ts';
import { ROOT, type ServerProcess } from '../support/server-process.ts';
import { describeWithTool } from '../support/tools.ts';

const ARTIFACTS = join(ROOT, 'test-artifacts');
const PASSWORD = 'a long browser password';

for (const kind of STORE_KINDS) {
  describeWithTool(consoleTools(kind), `console in Chromium (${kind})`, () => consoleFlow(kind));
}

function consoleFlow(kind: StoreKind): void {
  let session: ConsoleBrowser;
  let server: ServerProcess;
  let context: BrowserContext;
  let page: Page;
  const email = `browser-${Date.now()}@example.com`;
  const screenshot = join(ARTIFACTS, kind === 'redis' ? 'console-redis.png' : 'console.png');

  beforeAll(async () => {
    session = await startConsoleBrowser(kind);
    ({ server, context, page } = session);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  });

  afterAll(async () => {
    await session?.stop();
  });

  const detect = (key: string) =>
    fetch(`${server.url}/api/open/detect`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'image/jpeg' },
      body: new Uint8Array(readFileSync(fixture('320x240.jpg'))),
    });

  const usageText = async () => ({
    used: await page.locator('#usage-used').textContent(),
    remaining: await page.locator('#usage-remaining').textContent(),
    limit: await page.locator('#usage-limit').textContent(),
  });

  it('signs up, creates a key, sees its use counted, revokes it', async () => {
    await signUp(session, email, PASSWORD);
    expect(await page.locator('#who-email').textContent()).toBe(email);
    expect(await page.locator('#who-tier').textContent()).toBe('free');
    await expect.poll(usageText).toEqual({ used: '0', remaining: '100', limit: '100' });

    // The session cookie is HttpOnly (invisible to scripts), SameSite=Strict, scoped to /console.
    const cookies = await context.cookies(`${server.url}/console`);
    const cookie = cookies.find((c) => c.name === 'nsd_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/console', secure: false });
    expect(await page.evaluate(() => document.cookie)).toBe('');

    // Create a key: the secret is shown once, with a copy button.
    await page.locator('#create-key-form input[name=name]').fill('browser test');
    await page.locator('#create-key-form button[type=submit]').click();
    await page.locator('#new-key').waitFor();
    const secret = (await page.locator('#new-key-secret').textContent()) ?? '';
    expect(secret).toMatch(/^nsk_live_[0-9a-f]{32}$/);
    await page.locator('#new-key-copy').click();
    await page.locator('#new-key-copied').waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: screenshot.replace(/\.png$/, '-new-key.png'), fullPage: true });
    const row = page.locator('#keys-body tr');
    await expect.poll(() => row.count()).toBe(1);
    const rowText = (await row.first().textContent()) ?? '';
    expect(rowText).toContain('browser test');
    expect(rowText).toContain(`${secret.slice(0, 13)}…${secret.slice(-4)}`);
    expect(rowText).not.toContain(secret);

    // Use it.
    const res = await detect(secret);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-quota-tier')).toBe('free');
    expect(res.headers.get('x-ratelimit-limit')).toBe('100');
    expect(res.headers.get('x-ratelimit-remaining')).toBe('99');
    expect(((await res.json()) as { code: number }).code).toBe(0);

    // Reload: the secret is gone for good, the usage moved.
    await page.reload();
    await page.locator('#dashboard-view').waitFor();
    expect(await page.locator('#new-key').isHidden()).toBe(true);
    expect(await page.content()).not.toContain(secret);
    await expect.poll(usageText).toEqual({ used: '1', remaining: '99', limit: '100' });

    // Revoke (two clicks), then the key is refused on the very next request.
    const revoke = page.locator('#keys-body tr button.revoke');
    await revoke.click();
    await expect.poll(() => revoke.textContent()).toBe('Confirm revoke');
    await revoke.click();
    await expect.poll(() => page.locator('#keys-body tr .badge').textContent()).toBe('revoked');
    const refused = await detect(secret);
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { code: number }).code).toBe(4011);

    // The refusal used no quota.
    await page.locator('#usage-refresh').click();
    await expect.poll(usageText).toEqual({ used: '1', remaining: '99', limit: '100' });

    await page.screenshot({ path: screenshot, fullPage: true });
  });

  it('logs out and back in; a wrong password is refused on the page', async () => {
    await page.locator('#logout').click();
    await page.locator('#auth-view').waitFor();
    expect(
      (await context.cookies(`${server.url}/console`)).find((c) => c.name === 'nsd_session'),
    ).toBeUndefined();
    const login = page.locator('#login-form');
    await login.locator('input[name=email]').fill(email);
    await login.locator('input[name=password]').fill('not the password');
    await login.locator('button[type=submit]').click();
    await expect.poll(() => login.locator('.form-error').textContent()).toBe('Wrong email or password');
    await login.locator('input[name=password]').fill(PASSWORD);
    await login.locator('button[type=submit]').click();
    await page.locator('#dashboard-view').waitFor();
    await expect.poll(usageText).toEqual({ used: '1', remaining: '99', limit: '100' });
    await expect.poll(() => page.locator('#keys-body tr .badge').textContent()).toBe('revoked');
  });

  it('signing up again with the email (any case): the owner’s password signs in, another is told to log in', async () => {
    await page.locator('#logout').click();
    await page.locator('#auth-view').waitFor();
    const form = page.locator('#signup-form');
    await form.locator('input[name=email]').fill(email.toUpperCase());
    await form.locator('input[name=password]').fill('someone else’s password');
    await form.locator('button[type=submit]').click();
    // A sign-up and a login, each a scrypt hash: seconds on a loaded machine.
    await expect
      .poll(() => form.locator('.form-error').textContent(), { timeout: 30_000 })
      .toBe(
        'Could not sign you in with this password. If you already have an account with this email, log in with its password; an account an operator made without one needs a password first (ask your operator: npm run admin -- set-password).',
      );
    expect(await page.locator('#dashboard-view').isHidden()).toBe(true);
    await signUp(session, email.toUpperCase(), PASSWORD);
    expect(await page.locator('#who-email').textContent()).toBe(email);
    await expect.poll(() => page.locator('#keys-body tr .badge').textContent()).toBe('revoked');
  });
}
