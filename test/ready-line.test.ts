// `npm start` prints its "ready" line only once detect can score: a detect call sent the moment the
// line appears is scored (200), never refused with "model still loading" (503).

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { spawnChild } from './support/children.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-ready-'));
const READY = /^ready — (http:\/\/\S+) is scoring images/m;
let output = '';
let announce: (url: string) => void = () => {};
const ready = new Promise<string>((resolve) => {
  announce = resolve;
});
const server = spawnChild(
  'npm start',
  process.execPath,
  ['--import', 'tsx', 'services/all-in-one/server.ts'],
  {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      TSX_DISABLE_CACHE: '1',
      ACCOUNTS_FILE: join(dir, 'accounts.json'),
    },
    onOutput: (chunk) => {
      output += chunk;
      const line = READY.exec(output);
      if (line?.[1]) announce(line[1]);
    },
  },
);

afterAll(async () => {
  await server.kill();
  rmSync(dir, { recursive: true, force: true });
});

describe('the ready line of npm start', () => {
  it('appears only when a detect call is scored at once', async () => {
    const url = await Promise.race([
      ready,
      server.exited.then((code) => {
        throw new Error(`server exited (${code}) before ready:\n${output}`);
      }),
    ]);
    const response = await fetch(`${url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: readFileSync(fixture('320x240.jpg')),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    expect(((await response.json()) as { data: { decision: string } }).data.decision).toMatch(
      /^(allow|review|block)$/,
    );
    expect((await fetch(`${url}/internal/ready`)).status).toBe(200);
  }, 180_000);
});
