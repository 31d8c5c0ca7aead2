// The console as a dashboard, in a real headless Chromium against the real server process: a user
// signs up, creates a key, tries an image on the page ("Try it" calls the public API with the key),
// runs the curl command the page shows (same JSON), then calls until the minute limit has refused
// three (429), each call held to the window of the minute it was counted in. The 30-day chart and its
// table view show exactly those served and refused counts, for the account and for the key. On the embedded store, and again on a real redis-server when one is installed.
// Screenshots (light and dark) go to test-artifacts/.

import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Page } from 'playwright-core';
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
import { minuteOf, WindowLog } from '../support/window-log.ts';

const run = promisify(execFile);
const ARTIFACTS = join(ROOT, 'test-artifacts');
const IMAGE = '320x240.jpg';
const PER_MINUTE = 2;

for (const kind of STORE_KINDS) {
  describeWithTool(consoleTools(kind), `console dashboard in Chromium (${kind})`, () => dashboardFlow(kind));
}

function dashboardFlow(kind: StoreKind): void {
  let session: ConsoleBrowser;
  let server: ServerProcess;
  let page: Page;
  let dataDir: string;
  const suffix = kind === 'redis' ? '-redis' : '';

  beforeAll(async () => {
    session = await startConsoleBrowser(kind, { FREE_PER_MINUTE: String(PER_MINUTE) });
    ({ server, page, dataDir } = session);
    copyFileSync(fixture(IMAGE), join(dataDir, IMAGE));
  }, 120_000);

  afterAll(async () => {
    await session?.stop();
  });

  const today = () => new Date().toISOString().slice(0, 10);
  const todayRow = async () => {
    const row = page.locator('#history-body tr').first();
    return (await row.locator('td').allTextContents()).join(' ');
  };

  it('shows the calls made with a key, served and refused, in the 30-day chart and table', async () => {
    const consoleErrors: string[] = [];
    // Load failures (the logged-out session check's 401, the favicon's 404) are expected; a CSP
    // refusal or a script error is not.
    page.on('console', (m) => {
      if (m.type() === 'error' && !m.text().startsWith('Failed to load resource'))
        consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push(e.message));
    await signUp(session, `dash-${Date.now()}@example.com`, 'a long dashboard password');
    await page.locator('#create-key-form input[name=name]').fill('dashboard');
    await page.locator('#create-key-form button[type=submit]').click();
    await page.locator('#new-key').waitFor();
    const secret = (await page.locator('#new-key-secret').textContent()) ?? '';
    expect(await page.locator('#try-key').inputValue()).toBe(secret);
    // Thirty days, none used yet; the chart is drawn by the library served from our origin.
    await expect.poll(() => page.locator('#history-body tr').count()).toBe(30);
    await page.locator('#history-chart canvas').first().waitFor();
    expect(await page.evaluate(() => typeof (globalThis as { uPlot?: unknown }).uPlot)).toBe('function');

    // Every call with the key from here on, whichever minute it falls in (the limit is PER_MINUTE).
    const log = new WindowLog();
    const byStatus = (status: number) => (status === 200 ? 'served' : 'refused');

    // Try it: pick the image; the page shows the API's JSON and the equivalent commands.
    const tryStatus = await log.call(async () => {
      await page.locator('#try-file').setInputFiles(join(dataDir as string, IMAGE));
      await page.locator('#try-result').waitFor();
      return Number(await page.locator('#try-status').textContent());
    }, byStatus);
    expect(tryStatus).toBe(200);
    const shown = JSON.parse((await page.locator('#try-json').textContent()) ?? '') as {
      code: number;
      data: { decision: string; timing_ms: number; scores: { nsfw: number } };
    };
    expect(shown.code).toBe(0);
    expect(await page.locator('#try-decision').textContent()).toBe(shown.data.decision);
    expect(await page.locator('#try-nsfw').textContent()).toBe(shown.data.scores.nsfw.toFixed(4));
    expect(await page.locator('#try-facts').textContent()).toContain('jpeg · 320×240');

    // The curl command as shown, run by a shell in the image's folder: the same JSON (timing apart).
    const curl = (await page.locator('#try-curl').textContent()) ?? '';
    expect(curl).toContain(`Authorization: Bearer ${secret}`);
    expect(await page.locator('#try-cli').textContent()).toContain('python3 nsfwdetector.py detect');
    const { stdout } = await log.call(
      () => run('sh', ['-c', curl], { cwd: dataDir as string }),
      (r) => byStatus((JSON.parse(r.stdout) as { code: number }).code === 0 ? 200 : 429),
    );
    const viaCurl = JSON.parse(stdout) as typeof shown;
    const withoutTiming = (b: typeof shown) => ({ ...b, data: { ...b.data, timing_ms: 0 } });
    expect(withoutTiming(viaCurl)).toEqual(withoutTiming(shown));

    // The first two of a minute are served (both calls above were), the rest refused with 429: calls
    // until three were refused.
    expect(log.allowed(PER_MINUTE)).toContain(log.last());
    while (log.count('refused') < 3) {
      if (log.count('served') > 6) throw new Error('the minute limit never refused');
      const status = await log.call(async () => {
        const res = await fetch(`${server.url}/api/open/detect`, {
          method: 'POST',
          headers: { authorization: `Bearer ${secret}`, 'content-type': 'image/jpeg' },
          body: new Uint8Array(readFileSync(fixture(IMAGE))),
        });
        await res.body?.cancel();
        return res.status;
      }, byStatus);
      expect(log.allowed(PER_MINUTE)).toContain(log.last());
      expect([200, 429]).toContain(status);
    }
    const served = log.count('served');

    // The account's chart and table: today's served and refused; the windows with their resets.
    await page.locator('#usage-refresh').click();
    await page.locator('#history-table-view summary').click();
    await expect.poll(todayRow).toBe(`${today()} ${served} 3`);
    // The minute shown is the one the page asked in: it counts the calls served in it.
    const minuteReset = (await page.locator('#window-minute-reset').textContent()) ?? '';
    const shownMinute = minuteOf(Date.parse(minuteReset.replace(' ', 'T').replace(' UTC', 'Z'))) - 1;
    const [surely, atMost] = log.servedIn(shownMinute);
    const minuteUsed = Number(await page.locator('#window-minute-used').textContent());
    expect(minuteUsed).toBeGreaterThanOrEqual(surely);
    expect(minuteUsed).toBeLessThanOrEqual(atMost);
    expect(await page.locator('#window-minute-limit').textContent()).toBe(String(PER_MINUTE));
    expect(await page.locator('#window-day-reset').textContent()).toBe(
      `${new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)} 00:00:00 UTC`,
    );
    // The chart holds the same numbers: its legend, hovered on today's bar, reads them.
    const box = await page.locator('#history-chart .u-over').boundingBox();
    if (!box) throw new Error('no chart');
    await page.mouse.move(box.x + box.width - 2, box.y + box.height / 2);
    await expect
      .poll(async () =>
        (await page.locator('#history-chart .u-legend .u-value').allTextContents()).slice(1, 3),
      )
      .toEqual([String(served), '3']);
    // The scale follows the counts (a few), not the free tier's daily limit far above them, which the
    // legend names instead of drawing.
    const legend = await page.locator('#history-chart .u-legend .u-label').allTextContents();
    expect(legend).toContain('Daily limit 100 (above this scale)');
    // The key's own history: the same calls.
    const keyId = await page.locator('#history-key option').nth(1).getAttribute('value');
    await page.locator('#history-key').selectOption(keyId ?? '');
    await expect.poll(todayRow).toBe(`${today()} ${served} 3`);
    await page.locator('#history-key').selectOption('');
    await expect.poll(todayRow).toBe(`${today()} ${served} 3`);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, `console-dashboard${suffix}.png`), fullPage: true });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: join(ARTIFACTS, `console-dashboard-dark${suffix}.png`), fullPage: true });
    // CSP stays strict and the page obeys it: nothing was refused.
    expect(consoleErrors).toEqual([]);
  }, 180_000);
}
