// One console session for the browser suites: the real server process on the embedded accounts file or
// on a real redis-server, and Debian's Chromium (playwright-core) in a fresh profile. Call it in a
// beforeAll (a skipped suite's body still runs to collect; its hooks do not) and stop it in afterAll.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { childEnv } from './children.ts';
import { RedisServer } from './redis-server.ts';
import { type ServerProcess, startServer } from './server-process.ts';
import { CHROMIUM, REDIS_SERVER, type Tool } from './tools.ts';

export type StoreKind = 'accounts file' | 'redis';
export const STORE_KINDS: StoreKind[] = ['accounts file', 'redis'];

/** The tools a console suite on this store needs. */
export function consoleTools(kind: StoreKind): Tool[] {
  return kind === 'redis' ? [CHROMIUM, REDIS_SERVER] : [CHROMIUM];
}

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

export interface ConsoleBrowser {
  server: ServerProcess;
  context: BrowserContext;
  page: Page;
  /** A temp directory of the test's own (the accounts file lives here too); removed by stop(). */
  dataDir: string;
  stop(): Promise<void>;
}

export async function startConsoleBrowser(
  kind: StoreKind,
  env: Record<string, string> = {},
): Promise<ConsoleBrowser> {
  const dataDir = mkdtempSync(join(tmpdir(), 'nsfwdetector-console-'));
  const profileDir = mkdtempSync(join(tmpdir(), 'nsfwdetector-chromium-'));
  let redis: RedisServer | undefined;
  let server: ServerProcess | undefined;
  let context: BrowserContext | undefined;
  const stop = async () => {
    await context?.close();
    await server?.stop();
    await redis?.stop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(profileDir, { recursive: true, force: true });
  };
  try {
    const serverEnv: Record<string, string> = {
      ACCOUNTS_FILE: join(dataDir, 'accounts.json'),
      LOG_LEVEL: 'warn',
      ...env,
    };
    if (kind === 'redis') {
      redis = await RedisServer.start();
      serverEnv.REDIS_URL = redis.url;
    }
    server = await startServer(serverEnv);
    context = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM.find(),
      // The run's marker: the final check (run-guard.ts) finds a browser left running.
      env: childEnv(),
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1100, height: 900 },
    });
    const page = context.pages()[0] ?? (await context.newPage());
    return { server, context, page, dataDir, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Opens the console and signs up a new account; resolves once the dashboard shows. */
export async function signUp(session: ConsoleBrowser, email: string, password: string): Promise<void> {
  const { page, server } = session;
  await page.goto(`${server.url}/console`);
  await page.locator('#auth-view').waitFor();
  const form = page.locator('#signup-form');
  await form.locator('input[name=email]').fill(email);
  await form.locator('input[name=password]').fill(password);
  await form.locator('button[type=submit]').click();
  await page.locator('#dashboard-view').waitFor();
}
