// The image, `npm start` and the benchmarks run node the same way: the flags and environment of
// lib/common/node-runtime.ts, so what the benchmarks measure is what production runs.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../lib/common/node-runtime.ts';
import { ROOT } from './support/server-process.ts';

const dockerfile = readFileSync(join(ROOT, 'services/Dockerfile'), 'utf8');
const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  scripts: { start: string };
  devDependencies: Record<string, string>;
  volta: { node: string };
};
const start = manifest.scripts.start;
const pinned = readFileSync(join(ROOT, '.node-version'), 'utf8').trim();

describe('node runtime settings', () => {
  it('the image sets each production environment variable and node flag', () => {
    for (const [name, value] of Object.entries(PRODUCTION_ENV))
      expect(finalStage).toMatch(new RegExp(`^\\s+${name}=${value}\\b`, 'm'));
    const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(finalStage)?.[1];
    expect(JSON.parse(entrypoint ?? '[]')).toEqual(['node', ...PRODUCTION_NODE_FLAGS]);
  });

  it('npm start sets them too, running the compiled entry point the image runs', () => {
    for (const [name, value] of Object.entries(PRODUCTION_ENV)) expect(start).toContain(`${name}=${value} `);
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(finalStage)?.[1] ?? '[]') as string[];
    expect(cmd).toEqual(['dist/services/all-in-one/server.js']);
    expect(start).toMatch(new RegExp(`\\bnode ${PRODUCTION_NODE_FLAGS.join(' ')} ${cmd[0]}$`));
    expect(start).not.toContain('tsx');
  });
});

describe('the Node version', () => {
  it('is pinned in one place, .node-version, which every other pin names', () => {
    expect(pinned).toMatch(/^24\.\d+\.\d+$/);
    // npm puts the `node` package's binary first on every script's PATH, whatever Node runs npm.
    expect(manifest.devDependencies.node).toBe(pinned);
    expect(manifest.volta.node).toBe(pinned);
    expect(readFileSync(join(ROOT, '.nvmrc'), 'utf8').trim()).toBe(pinned);
    expect(dockerfile).toContain(`ARG NODE_BASE=node:${pinned}-bookworm-slim`);
  });

  it('is the one these tests run on (npm test puts it first on PATH)', () => {
    expect(process.version).toBe(`v${pinned}`);
  });
});
