// The API reference page (/docs/api) in a real headless Chromium: under its strict CSP it renders one
// section per operation of /openapi.json, with the detect endpoints' request ways and error codes, and
// the browser reports no script error and no CSP refusal. Leaves test-artifacts/api-docs.png.
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

  it('renders every operation of /openapi.json, with no script error or CSP refusal', async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 1400 } });
    const problems: string[] = [];
    page.on('pageerror', (err) => problems.push(String(err)));
    page.on('console', (message) => {
      // The browser's own favicon request is the one 404 expected here.
      if (message.type() === 'error' && !message.text().includes('404')) problems.push(message.text());
    });
    await page.goto(`${url}/docs/api`);
    await page.locator('section.op').first().waitFor();

    const doc = (await (await fetch(`${url}/openapi.json`)).json()) as { paths: Record<string, object> };
    const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()}${path}`),
    );
    const rendered = await page
      .locator('section.op h3')
      .evaluateAll((headings) => headings.map((h) => (h.textContent ?? '').replace(/\s+/g, '')));
    expect(rendered.sort()).toEqual(operations.sort());

    const detect = page.locator('section.op', { hasText: '/api/open/detect' });
    const text = await detect.textContent();
    for (const expected of [
      'multipart/form-data',
      'image/jpeg',
      'image/gif',
      '4001',
      '4005',
      '4011',
      '4291',
      '5001',
    ]) {
      expect(text, expected).toContain(expected);
    }
    mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
    await page.screenshot({ path: join(ROOT, 'test-artifacts', 'api-docs.png'), fullPage: true });
    expect(problems).toEqual([]);
  });
});
