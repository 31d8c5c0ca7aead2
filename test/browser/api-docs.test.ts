// The API reference page (/docs/api, Swagger UI) in a real headless Chromium: under its strict CSP it
// renders every operation of /openapi.json, the three public endpoints first, with examples of the
// answers (every error code's envelope), the descriptions' Markdown rendered (no backtick left in the
// visible text), and the browser reports no script error and no CSP refusal. Leaves
// test-artifacts/api-docs.png.
//
// Chromium missing: fails under CI=true, otherwise skipped with the install command.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { childEnv } from '../support/children.ts';
import { embeddedApp } from '../support/embedded-app.ts';
import { ROOT } from '../support/server-process.ts';
import { CHROMIUM, describeWithTool } from '../support/tools.ts';

describeWithTool(CHROMIUM, 'API reference page in Chromium', () => {
  let app: Awaited<ReturnType<typeof embeddedApp>>['app'];
  let browser: Browser;
  let url: string;

  beforeAll(async () => {
    ({ app } = await embeddedApp());
    await app.listen({ port: 0, host: '127.0.0.1' });
    url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    browser = await chromium.launch({
      executablePath: CHROMIUM.find(),
      env: childEnv(),
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('lists the public endpoints first, with examples and rendered Markdown, and no CSP refusal', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 1400 } });
    const problems: string[] = [];
    page.on('pageerror', (err) => problems.push(String(err)));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    await page.goto(`${url}/docs/api`);
    await page.locator('.opblock').first().waitFor();

    const doc = (await (await fetch(`${url}/openapi.json`)).json()) as { paths: Record<string, object> };
    const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
    );
    const rendered = await page
      .locator('.opblock-summary')
      .evaluateAll((summaries) =>
        summaries.map(
          (s) =>
            `${s.querySelector('.opblock-summary-method')?.textContent} ${s.querySelector('.opblock-summary-path')?.getAttribute('data-path')}`,
        ),
      );
    expect([...rendered].sort()).toEqual([...operations].sort());
    expect(rendered.slice(0, 3)).toEqual([
      'POST /api/public/detect',
      'POST /api/open/detect',
      'GET /api/public/health',
    ]);

    // Open the keyed endpoint: its request ways, its curl example, and an example of every answer.
    const detect = page.locator('.opblock', { has: page.locator('[data-path="/api/open/detect"]') });
    await detect.locator('.opblock-summary').click();
    await detect.locator('.responses-table').first().waitFor();
    const text = (await detect.innerText()).replace(/\s+/g, ' ');
    expect(text).toContain('curl -H');
    expect(text).toContain('multipart/form-data');
    expect(text).toMatch(/"decision": "allow"/);
    const badRequest = detect.locator('tr.response[data-code="400"]');
    const options = await badRequest.locator('select option').allInnerTexts();
    for (const code of ['4001', '4002', '4003', '4004', '4005']) {
      expect(options.join('|'), code).toContain(code);
    }
    expect(await badRequest.innerText()).toMatch(/"code": 4001,\s*"message": "Bad request"/);
    for (const [status, code] of [
      ['401', '4011'],
      ['429', '4290'],
      ['503', '5001'],
    ]) {
      expect(await detect.locator(`tr.response[data-code="${status}"]`).innerText(), status).toContain(
        `"code": ${code}`,
      );
    }

    // Markdown is rendered: the description's `code` spans are <code>, no backtick is shown.
    expect(await page.locator('.info .renderedMarkdown code').count()).toBeGreaterThan(0);
    expect(await page.locator('body').innerText()).not.toContain('`');

    mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
    await page.screenshot({ path: join(ROOT, 'test-artifacts', 'api-docs.png'), fullPage: true });
    expect(problems).toEqual([]);
  });
});
