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

  it("shows every documented field of both detect answers with its description, and the headers' types", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    await page.goto(`${url}/docs/api`);
    await page.locator('.opblock').first().waitFor();
    const doc = (await (await fetch(`${url}/openapi.json`)).json()) as OpenApi;
    for (const path of ['/api/public/detect', '/api/open/detect']) {
      const ok = doc.paths[path]?.post?.responses['200'];
      const schema = ok?.content['application/json']?.schema as JsonSchema;
      const fields = documentedFields(schema);
      // Every response field is described (the document), then shown with its description (the page).
      expect(
        fields.filter((f) => !f.description).map((f) => f.path),
        path,
      ).toEqual([]);
      expect(fields.map((f) => f.path)).toEqual(
        expect.arrayContaining(['data.model', 'data.classes', 'data.image.format', 'data.decision']),
      );
      const op = page.locator('.opblock', { has: page.locator(`[data-path="${path}"]`) });
      await op.locator('.opblock-summary').click();
      const response = op.locator('tr.response[data-code="200"]');
      await response.locator('button[data-name="model"], a[data-name="model"]').first().click();
      // Expand the schema to its leaves (Swagger UI's JSON Schema 2020-12 view: "Expand all").
      const deep = response.locator('.json-schema-2020-12-expand-deep-button').first();
      if ((await deep.innerText()).includes('Collapse')) await deep.click();
      await deep.click();
      await expect.poll(() => deep.innerText()).toContain('Collapse');
      // The deep expansion renders level by level: wait until every field's description is on the page.
      const missing = async () => {
        const text = (await response.innerText()).replace(/\s+/g, ' ');
        return fields.filter((f) => !text.includes(f.name) || !text.includes(plain(f.description ?? '')));
      };
      await expect.poll(async () => (await missing()).map((f) => f.path), { timeout: 15_000 }).toEqual([]);
      const shown = (await response.innerText()).replace(/\s+/g, ' ');
      for (const field of fields) {
        expect(shown, field.path).toContain(field.name);
        expect(shown, field.path).toContain(plain(field.description ?? ''));
      }
      expect(shown).toContain('"jpeg"');
      // The rate-limit headers are integers.
      for (const header of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
        expect(ok?.headers[header]?.schema.type, header).toBe('integer');
      }
      await op.locator('.opblock-summary').click();
    }
    await page.screenshot({ path: join(ROOT, 'test-artifacts', 'api-docs-fields.png'), fullPage: true });
    // No reference to documents a user does not have.
    expect(JSON.stringify(doc)).not.toMatch(/spec (part )?\d/);
  });
});

interface JsonSchema {
  description?: string;
  properties?: Record<string, JsonSchema>;
  additionalProperties?: JsonSchema | boolean;
}
interface OpenApi {
  paths: Record<
    string,
    Record<
      string,
      {
        responses: Record<
          string,
          {
            content: Record<string, { schema: unknown }>;
            headers: Record<string, { schema: { type: string } }>;
          }
        >;
      }
    >
  >;
}

/** Every property of a response schema, by its dotted path, with its description. */
function documentedFields(
  schema: JsonSchema,
  prefix = '',
): Array<{ path: string; name: string; description?: string }> {
  return Object.entries(schema.properties ?? {}).flatMap(([name, sub]) => {
    const path = prefix ? `${prefix}.${name}` : name;
    return [{ path, name, description: sub.description }, ...documentedFields(sub, path)];
  });
}

/** A description as Swagger UI shows it: Markdown's code spans rendered, whitespace collapsed. */
const plain = (markdown: string) => markdown.replace(/`/g, '').replace(/\s+/g, ' ');
