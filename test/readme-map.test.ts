// The map of the tree (docs/development.md, its "Map of the tree" section) stays true: every folder it
// names exists, and every folder of services/, lib/ and tools/ (and their code folders one level down) is
// named.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const page = readFileSync(join(root, 'docs/development.md'), 'utf8');

function mapFolders(): string[] {
  const start = page.indexOf('\n## Map of the tree\n');
  if (start < 0) throw new Error('docs/development.md has no "## Map of the tree" section');
  const section = page.slice(start);
  const block = /```\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
  return [...block.matchAll(/^(\S+\/)\s/gm)].map((m) => m[1] as string);
}

function subfolders(dir: string): string[] {
  return readdirSync(join(root, dir))
    .filter((name) => !name.startsWith('.') && name !== 'node_modules')
    .filter((name) => statSync(join(root, dir, name)).isDirectory())
    .map((name) => `${dir}${name}/`);
}

describe('the map of the tree (docs/development.md)', () => {
  const named = mapFolders();

  it('names folders', () => {
    expect(named.length).toBeGreaterThan(20);
  });

  it('names only folders that exist', () => {
    expect(named.filter((folder) => !existsSync(join(root, folder)))).toEqual([]);
  });

  it('names every folder of services/, lib/ and tools/ and every code folder inside them', () => {
    const codeFolder = (folder: string) =>
      readdirSync(join(root, folder)).some((f) => /\.(ts|c|py|md)$/.test(f) && !/\.test\.ts$/.test(f));
    const folders = ['services/', 'lib/', 'tools/'].flatMap(subfolders);
    const inner = folders.flatMap(subfolders).filter(codeFolder);
    expect(named).toEqual(expect.arrayContaining(['services/', 'lib/', 'tools/']));
    expect([...folders, ...inner].filter((folder) => !named.includes(folder))).toEqual([]);
  });
});
