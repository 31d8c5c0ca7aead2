import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sourceHash } from './sources.ts';

let root: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'nsfwdetector-sources-'));
  mkdirSync(join(root, 'services/detect'), { recursive: true });
  mkdirSync(join(root, 'lib/common'), { recursive: true });
  mkdirSync(join(root, 'tools/build'), { recursive: true });
  mkdirSync(join(root, 'models'));
  writeFileSync(join(root, 'lib/common/errors.ts'), 'export {};\n');
  writeFileSync(join(root, 'tools/build/dist.ts'), 'export {};\n');
  writeFileSync(join(root, 'services/detect/server.ts'), 'export {};\n');
  writeFileSync(join(root, 'services/detect/page.html'), '<p>hi</p>\n');
  writeFileSync(join(root, 'models/model.onnx'), 'weights');
  for (const name of ['package.json', 'tsconfig.json', 'tsconfig.build.json'])
    writeFileSync(join(root, name), '{}');
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('the hash dist/ is built from', () => {
  it('is the same for the same files, whatever their mtimes', () => {
    const before = sourceHash(root);
    utimesSync(join(root, 'services/detect/server.ts'), 1, 1);
    expect(sourceHash(root)).toBe(before);
  });

  it('changes when a source, a copied asset, a setting or a file name changes', () => {
    const seen = new Set([sourceHash(root)]);
    const changes = [
      () => writeFileSync(join(root, 'services/detect/server.ts'), 'export const x = 1;\n'),
      () => writeFileSync(join(root, 'services/detect/page.html'), '<p>hello</p>\n'),
      () => writeFileSync(join(root, 'lib/common/errors.ts'), 'export const y = 1;\n'),
      () => writeFileSync(join(root, 'tools/build/dist.ts'), 'export const z = 1;\n'),
      () => writeFileSync(join(root, 'tsconfig.build.json'), '{"compilerOptions":{}}'),
      () => writeFileSync(join(root, 'services/detect/new.ts'), ''),
    ];
    for (const change of changes) {
      change();
      seen.add(sourceHash(root));
    }
    expect(seen.size).toBe(changes.length + 1);
  });

  it('leaves the tests out: they are not built', () => {
    const before = sourceHash(root);
    writeFileSync(join(root, 'services/detect/server.test.ts'), 'it();\n');
    expect(sourceHash(root)).toBe(before);
  });

  it('tells a reconverted model by its size and mtime', () => {
    const before = sourceHash(root);
    utimesSync(join(root, 'models/model.onnx'), 1, 1);
    expect(sourceHash(root)).not.toBe(before);
  });
});
