// The console in a real headless Chromium (Debian's, driven by playwright-core) against the real
// server process: sign up → create a key (secret shown once) → call /api/open/detect with it → usage
// moves → revoke → the key gets 401/4011. Runs on the embedded accounts file, and again on a real
// redis-server (REDIS_URL) when one is installed. Leaves test-artifacts/console.png (and
// console-redis.png) for a human to look at.
//
// Chromium missing: fails under CI=true, otherwise skipped with the install command.

import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fixture } from '../fixtures/corpus.ts';
import { childEnv } from '../support/children.ts';
import { RedisServer } from '../support/redis-server.ts';
import { ROOT, type ServerProcess, startServer } from '../support/server-process.ts';
import { CHROMIUM, describeWithTool, REDIS_SERVER } from '../support/tools.ts';

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];
const ARTIFACTS = join(ROOT, 'test-artifacts');
const PASSWORD = 'a long browser password';

type StoreKind = 'accounts file' | 'redis';

for (const kind of ['accounts file', 'redis'] as StoreKind[]) {
  const tools = kind === 'redis' ? [CHROMIUM, REDIS_SERVER] : [CHROMIUM];
  describeWithTool(tools, `console in Chromium (${kind})`, () => consoleFlow(kind));
}

function consoleFlow(kind: StoreKind): void {
  let server: ServerProcess;
  let redis: RedisServer | undefined;
  let context: BrowserContext;
  let page: Page;
  // Made in beforeAll, not here: a skipped suite's body still runs (to collect), its hooks do not.
  let dataDir: string | undefined;
  let profileDir: string | undefined;
  const email = `browser-${Date.now()}@example.com`;
  const screenshot = join(ARTIFACTS, kind === 'redis' ? 'console-redis.png' : 'console.png');

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'nsfwdetector-console-'));
    profileDir = mkdtempSync(join(tmpdir(), 'nsfwdetector-chromium-'));
    const env: Record<string, string> = {
      ACCOUNTS_FILE: join(dataDir as string, 'accounts.json'),
      LOG_LEVEL: 'warn',
    };
    if (kind === 'redis') {
      redis = await RedisServer.start();
      env.REDIS_URL = redis.url;
    }
    server = await startServer(env);
    context = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM.find(),
      // The run's marker: the final check (run-guard.ts) finds a browser left running.
      env: childEnv(),
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1100, height: 900 },
    });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    page = context.pages()[0] ?? (await context.newPage());
  });

  afterAll(async () => {
    await context?.close();
    await server?.stop();
    await redis?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    if (profileDir) rmSync(profileDir, { recursive: true, force: true });
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
    // Sign up.
    await page.goto(`${server.url}/console`);
    await page.locator('#auth-view').waitFor();
    const signup = page.locator('#signup-form');
    await signup.locator('input[name=email]').fill(email);
    await signup.locator('input[name=password]').fill(PASSWORD);
    await signup.locator('button[type=submit]').click();
    await page.locator('#dashboard-view').waitFor();
    expect(await page.locator('#who-email').textContent()).toBe(email);
    expect(await page.locator('#who-tier').textContent()).toBe('free');
    await expect.poll(usageText).toEqual({ used: '0', remaining: '100', limit: '100' });

    // The session cookie is HttpOnly (invisible to scripts), SameSite=Strict, scoped to /console.
    const cookies = await context.cookies(`${server.url}/console`);
    const session = cookies.find((c) => c.name === 'nsd_session');
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/console', secure: false });
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
}
