// The direction of the tree, checked: services/common and services/policy are leaves every process may
// load (they import no service), and the arrows between the other folders under services/ are exactly
// the ones listed here. A new arrow fails this test until it is added below, with its reason; an arrow
// that disappears fails it too, so the list stays the truth.

import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const SERVICES = join(repoRoot, 'services');

/** The folders under services/ that import no service: any process may load them. */
const LEAVES: Record<string, readonly string[]> = {
  common: [],
  policy: ['common'],
};

/** Every other arrow between folders of services/ (test files aside), and why it exists. */
const ARROWS: Record<string, Record<string, string>> = {
  admin: { quota: "the admin CLI works on the quota service's accounts and keys, through its stores" },
  'all-in-one': {
    detect: '`npm start` composes every service in one process',
    health: '`npm start` composes every service in one process',
    openapi: '`npm start` composes every service in one process',
    quota: '`npm start` composes every service in one process',
  },
  calibrate: { detect: 'scores files through the detect pipeline itself' },
  health: {
    detect: 'the published contract documents the upload limits detect reads',
    openapi: 'the health server serves the published contract',
  },
  openapi: {
    detect: 'the document is generated from the routes themselves',
    health: 'the document is generated from the routes themselves',
  },
  operator: { quota: 'it writes the APIAccounts it reconciles to the account store' },
};

const SOURCE = /\.(ts|mts|mjs)$/;
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)'(\.{1,2}\/[^']+)'/g;

function sources(): string[] {
  return (readdirSync(SERVICES, { recursive: true }) as string[])
    .filter((f) => SOURCE.test(f) && !f.includes('node_modules'))
    .map((f) => join(SERVICES, f));
}

/** The folder of services/ a path is in, or undefined outside services/. */
function folderOf(path: string): string | undefined {
  const rel = relative(SERVICES, path);
  return rel.startsWith('..') ? undefined : rel.split('/')[0];
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

describe('the import graph of services/', () => {
  const all = sources();
  const isTest = (f: string) => /\.(test|contract)\.ts$/.test(f);

  it('finds the imports it checks', () => {
    expect(arrows(all).size).toBeGreaterThan(10);
    expect([...arrows(all).keys()]).toContain('detect → common');
  });

  it('has leaves that import no service, tests included', () => {
    for (const [leaf, allowed] of Object.entries(LEAVES)) {
      const out = [...arrows(all.filter((f) => folderOf(f) === leaf)).entries()]
        .filter(([arrow]) => !allowed.some((to) => arrow.endsWith(`→ ${to}`)))
        .map(([arrow, file]) => `${arrow} (${file})`);
      expect(out, `services/${leaf} must stay a leaf`).toEqual([]);
    }
  });

  it('has exactly the listed arrows between services', () => {
    const leafArrow = (arrow: string) => Object.keys(LEAVES).some((leaf) => arrow.endsWith(`→ ${leaf}`));
    const found = [...arrows(all.filter((f) => !isTest(f))).keys()].filter((a) => !leafArrow(a)).sort();
    const listed = Object.entries(ARROWS)
      .flatMap(([from, tos]) => Object.keys(tos).map((to) => `${from} → ${to}`))
      .sort();
    expect(found).toEqual(listed);
  });
});
