import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SPEC_PATH } from '../../test/support/paths.ts';
import { ERRORS } from './errors.ts';

/** Rows of the part-7 table: `| 400 | 4001 | Bad request | … |`. */
function specErrorRows(): Array<{ status: number; code: number }> {
  const spec = readFileSync(SPEC_PATH, 'utf8');
  const part7 = spec.slice(spec.indexOf('## 7. Errors'), spec.indexOf('## 8.'));
  return [...part7.matchAll(/^\|\s*(\d{3})\s*\|\s*(\d{4})\s*\|/gm)].map((m) => ({
    status: Number(m[1]),
    code: Number(m[2]),
  }));
}

describe('error table', () => {
  const entries = Object.values(ERRORS);

  it('has every code of spec part 7 with its HTTP status', () => {
    const rows = specErrorRows();
    expect(rows.length).toBe(9);
    for (const row of rows) expect(entries).toContainEqual(expect.objectContaining(row));
  });

  it('uses each code once', () => {
    const codes = entries.map((e) => e.code);
    expect(new Set(codes).size).toBe(codes.length);
  });

  it('documents every code in the README error table', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    for (const { status, code } of entries)
      expect(readme).toMatch(new RegExp(`\\|\\s*${status}\\s*\\|\\s*${code}\\s*\\|`));
  });
});
