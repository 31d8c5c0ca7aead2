// The direction of the tree, checked. lib/ holds the leaves every process may load: they import no
// service and no tool, and the arrows between them are the ones listed in LIB. services/ holds the
// deployables: they import lib/, never tools/, and the arrows between services are exactly the ones listed
// in ARROWS. tools/ (not deployed) may import both. A new arrow fails this test until it is added below,
// with its reason; an arrow that disappears fails it too, so the lists stay the truth.

import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const ROOTS = ['lib', 'services', 'tools'] as const;

/** The folders of lib/, each with the other folders of lib/ it may import. */
const LIB: Record<string, readonly string[]> = {
  common: [],
  policy: ['common'],
  openapi: ['common'],
  'hash-lists': [],
};

/** Every arrow between folders of services/ (test files aside), and why it exists. */
const ARROWS: Record<string, Record<string, string>> = {
  admin: { quota: "the admin CLI works on the quota service's accounts and keys, through its stores" },
  'all-in-one': {
    detect: '`npm start` composes every service in one process',
    health: '`npm start` composes every service in one process',
    quota: '`npm start` composes every service in one process',
  },
  detect: {
    quota: "it reads the operator's hash lists from Redis over the services' one Redis connection code",
  },
  operator: { quota: 'it writes the APIAccounts it reconciles to the account store' },
};

const SOURCE = /\.(ts|mts|mjs)$/;
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)'(\.{1,2}\/[^']+)'/g;

function sources(): string[] {
  return ROOTS.flatMap((top) =>
    (readdirSync(join(repoRoot, top), { recursive: true }) as string[])
      .filter((f) => SOURCE.test(f) && !f.includes('node_modules'))
      .map((f) => join(repoRoot, top, f)),
  );
}

/** The folder a path is in, as `services/detect`, `lib/common` or `tools/stack`; undefined elsewhere. */
function folderOf(path: string): string | undefined {
  const [top, folder, ...rest] = relative(repoRoot, path).split('/');
  if (!ROOTS.includes(top as (typeof ROOTS)[number]) || !folder || rest.length === 0) return undefined;
  return `${top}/${folder}`;
}

/** Arrows folder → folder, each with one file that draws it. */
function arrows(files: string[]): Map<string, string> {
  const found = new Map<string, string>();
  for (const file of files) {
    const from = folderOf(file);
    for (const [, spec] of readFileSync(file, 'utf8').matchAll(IMPORT)) {
      const to = folderOf(resolve(dirname(file), spec as string));
      if (from && to && from !== to && !found.has(`${from} → ${to}`))
        found.set(`${from} → ${to}`, relative(repoRoot, file));
    }
  }
  return found;
}

const under = (top: string) => (arrow: string) => arrow.startsWith(`${top}/`);
const into = (top: string) => (arrow: string) => arrow.split(' → ')[1]?.startsWith(`${top}/`) ?? false;

describe('the import graph of lib/, services/ and tools/', () => {
  const all = sources();
  const isTest = (f: string) => /\.(test|contract)\.ts$/.test(f);
  const found = arrows(all);

  it('finds the imports it checks', () => {
    expect(found.size).toBeGreaterThan(10);
    expect([...found.keys()]).toContain('services/detect → lib/common');
    expect([...found.keys()]).toContain('tools/calibrate → services/detect');
  });

  it('has a lib/ that imports no service and no tool, and only the listed folders of lib/, tests included', () => {
    const out = [...found.entries()]
      .filter(([arrow]) => under('lib')(arrow))
      .filter(([arrow]) => {
        const [from, to] = arrow.split(' → ') as [string, string];
        const allowed = LIB[from.slice('lib/'.length)] ?? [];
        return !allowed.some((folder) => to === `lib/${folder}`);
      })
      .map(([arrow, file]) => `${arrow} (${file})`);
    expect(out).toEqual([]);
  });

  it('lists every folder of lib/', () => {
    const folders = readdirSync(join(repoRoot, 'lib'), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    expect(folders).toEqual(Object.keys(LIB).sort());
  });

  it('has services that never import a tool, tests included', () => {
    const out = [...found.entries()]
      .filter(([arrow]) => under('services')(arrow) && into('tools')(arrow))
      .map(([arrow, file]) => `${arrow} (${file})`);
    expect(out).toEqual([]);
  });

  it('has exactly the listed arrows between services', () => {
    const between = [...arrows(all.filter((f) => !isTest(f))).keys()]
      .filter((arrow) => under('services')(arrow) && into('services')(arrow))
      .sort();
    const listed = Object.entries(ARROWS)
      .flatMap(([from, tos]) => Object.keys(tos).map((to) => `services/${from} → services/${to}`))
      .sort();
    expect(between).toEqual(listed);
  });
});
