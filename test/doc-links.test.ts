// The links between the pages hold: every relative Markdown link in README.md, docs/*.md and the
// chart README points to a file that exists, and every `#anchor` (on the same page or another) to a
// heading of that page, slugged as GitHub slugs them.

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const pages = [
  'README.md',
  'charts/nsfwdetector/README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The text outside fenced code blocks and inline code, where a link is a link. */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .replace(/`/g, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor of a page: its headings' slugs, a repeated one numbered -1, -2 … as GitHub does. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  const outsideCode = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const match of outsideCode.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(match[1] as string);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    result.add(count === 0 ? base : `${base}-${count}`);
  }
  return result;
}

interface Link {
  page: string;
  target: string;
}

function links(page: string): Link[] {
  const text = prose(readFileSync(join(root, page), 'utf8'));
  return [...text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)]
    .map((m) => m[1] as string)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
    .map((target) => ({ page, target }));
}

/** Why a link is broken, or undefined when it holds. */
function broken({ page, target }: Link): string | undefined {
  const [path = '', anchor] = target.split('#', 2);
  const file = path === '' ? join(root, page) : join(root, dirname(page), decodeURIComponent(path));
  if (!existsSync(file)) return `${page}: ${target}: no file ${relative(root, file)}`;
  if (anchor === undefined) return undefined;
  if (statSync(file).isDirectory() || !file.endsWith('.md'))
    return `${page}: ${target}: an anchor into a non-page`;
  if (!anchors(readFileSync(file, 'utf8')).has(decodeURIComponent(anchor)))
    return `${page}: ${target}: no heading #${anchor} in ${relative(root, file)}`;
  return undefined;
}

describe('links between the documentation pages', () => {
  const all = pages.flatMap(links);

  it('finds the links (README, docs/, the chart README)', () => {
    expect(pages).toContain('docs/configuration.md');
    expect(all.filter((link) => link.page === 'README.md').length).toBeGreaterThan(20);
    expect(all.some((link) => link.target.includes('#'))).toBe(true);
  });

  it('point to files that exist and to headings those files have', () => {
    expect(all.map(broken).filter((reason) => reason !== undefined)).toEqual([]);
  });
});

describe("GitHub's heading slugs", () => {
  it('lower-cases, drops punctuation and code marks, turns spaces into hyphens', () => {
    expect(slug('What a ~1 MP JPEG costs the server')).toBe('what-a-1-mp-jpeg-costs-the-server');
    expect(slug('Quantised model (built, not shipped)')).toBe('quantised-model-built-not-shipped');
    expect(slug('`skaffold dev`: the dev loop')).toBe('skaffold-dev-the-dev-loop');
    expect(slug('Policy — and accounts')).toBe('policy--and-accounts');
    expect(slug('snake_case and-hyphen')).toBe('snake_case-and-hyphen');
  });

  it('numbers a repeated heading', () => {
    expect([...anchors('# A\n\n## Errors\n\n```\n## Not a heading\n```\n\n## Errors\n')]).toEqual([
      'a',
      'errors',
      'errors-1',
    ]);
  });
});
