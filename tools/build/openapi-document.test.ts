// The published contract the health service serves is the document the routes produce: the file beside
// it is current (regenerate: npm run openapi), it is what `npm start` publishes from its own routes, and
// a stale file is found.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { readPublicDocument } from '../../services/health/public-document.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { buildPublicDocument, DOCUMENT_PATH, documentIsCurrent, documentText } from './openapi-document.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-openapi-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('services/health/openapi.json', () => {
  it('is the document the routes produce (regenerate: npm run openapi)', async () => {
    expect(readFileSync(DOCUMENT_PATH, 'utf8')).toBe(documentText(await buildPublicDocument()));
    expect(await documentIsCurrent()).toBe(true);
  });

  it('is the document `npm start` publishes from its own routes', async () => {
    const { app } = await embeddedApp();
    try {
      const response = await app.inject({ method: 'GET', url: '/openapi.json' });
      expect(response.statusCode).toBe(200);
      expect(readPublicDocument()).toEqual(response.json());
    } finally {
      await app.close();
    }
  });

  it('is found stale when it differs from what the routes produce', async () => {
    const document = JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8')) as { info: { version: string } };
    const stale = join(dir, 'stale.json');
    writeFileSync(stale, documentText({ ...document, info: { ...document.info, version: '0.0.0' } }));
    expect(await documentIsCurrent(stale)).toBe(false);
    expect(await documentIsCurrent(join(dir, 'missing.json'))).toBe(false);
  });

  it('`npm run openapi -- --check` exits 0 on this tree, and `--out` writes the same document', async () => {
    const out = join(dir, 'out.json');
    const run = (...args: string[]) =>
      promisify(execFile)(process.execPath, ['--import', 'tsx', 'tools/build/generate-openapi.ts', ...args], {
        cwd: ROOT,
      });
    expect((await run('--check')).stderr).toBe('');
    await run('--out', out);
    expect(readFileSync(out, 'utf8')).toBe(readFileSync(DOCUMENT_PATH, 'utf8'));
  });
});
