// The image, `npm start` and the benchmarks run node the same way: the flags and environment of
// services/common/node-runtime.ts, so what the benchmarks measure is what production runs.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PRODUCTION_ENV, PRODUCTION_NODE_FLAGS } from '../services/common/node-runtime.ts';
import { ROOT } from './support/server-process.ts';

const dockerfile = readFileSync(join(ROOT, 'services/Dockerfile'), 'utf8');
const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } })
  .scripts.start;

describe('node runtime settings', () => {
  it('the image sets each production environment variable and node flag', () => {
    for (const [name, value] of Object.entries(PRODUCTION_ENV))
      expect(finalStage).toMatch(new RegExp(`^\\s+${name}=${value}\\b`, 'm'));
    const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(finalStage)?.[1];
    expect(JSON.parse(entrypoint ?? '[]')).toEqual(['node', ...PRODUCTION_NODE_FLAGS]);
  });

  it('npm start sets them too', () => {
    for (const [name, value] of Object.entries(PRODUCTION_ENV)) expect(start).toContain(`${name}=${value} `);
    expect(start).toContain(`node ${PRODUCTION_NODE_FLAGS.join(' ')} --import tsx`);
  });
});
