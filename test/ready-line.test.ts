// `npm start` — the README's first command, run as a newcomer runs it: npm from the machine's PATH
// without this project's node_modules/.bin, so whatever Node the machine has (Node 20 on these) —
// prints its "ready" line only once detect can score: a detect call sent the moment the line appears
// is scored (200), never refused with "model still loading" (503). What runs is what the image runs: the
// compiled dist/ (built by the prestart when the sources changed), with no tsx or esbuild process.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { spawnChild } from './support/children.ts';
import { commandLine, executable, processTree } from './support/process-tree.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-ready-'));
const READY = /^ready — (http:\/\/\S+) is scoring images/m;
let output = '';
let announce: (url: string) => void = () => {};
const ready = new Promise<string>((resolve) => {
  announce = resolve;
});
// The PATH npm test gave us, less the entries npm added (each project's node_modules/.bin).
const machinePath = (process.env.PATH ?? '')
  .split(delimiter)
  .filter((entry) => !entry.endsWith(join('node_modules', '.bin')))
  .join(delimiter);
const server = spawnChild('npm start', 'npm', ['start', '--silent'], {
  cwd: ROOT,
  env: {
    ...process.env,
    PATH: machinePath,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    ACCOUNTS_FILE: join(dir, 'accounts.json'),
  },
  onOutput: (chunk) => {
    output += chunk;
    const line = READY.exec(output);
    if (line?.[1]) announce(line[1]);
  },
});

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

  it('is the compiled server, with no tsx or esbuild process beside it', async () => {
    await ready;
    const tree = processTree(server.pid);
    const commands = tree.map(commandLine).filter((command) => command !== undefined);
    // Node processes other than npm itself (npm renames its process title to `npm start`).
    const nodes = tree
      .filter((pid) => basename(executable(pid) ?? '') === 'node')
      .map(commandLine)
      .filter((command): command is string => command !== undefined && !command.startsWith('npm'));
    // The server alone: its decoder processes (compiled too) start only for an image that needs
    // isolating, and the ordinary JPEG scored above decoded in a worker thread.
    const decoder = /\/dist\/services\/detect\/scoring\/decoder-process\.js /;
    expect(
      nodes.filter((command) => !decoder.test(command)),
      commands.join('\n'),
    ).toEqual(['node --max-semi-space-size=1 dist/services/all-in-one/server.js']);
    expect(
      nodes.filter((command) => decoder.test(command)),
      commands.join('\n'),
    ).toEqual([]);
    expect(
      commands.filter((command) => /tsx|esbuild/.test(command)),
      commands.join('\n'),
    ).toEqual([]);
  });
});
