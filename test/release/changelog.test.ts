// CHANGELOG.md's sections (tools/release/changelog.ts): from a real git repository made in the file's
// temp dir, the first release and a later one, and a version never written twice.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { changelogSection, commitsSince, previousTag, withSection } from '../../tools/release/changelog.ts';

function repoWith(subjects: string[]): { dir: string; git: (...a: string[]) => string } {
  const dir = mkdtempSync(join(tmpdir(), 'changelog-'));
  const git = (...a: string[]) =>
    execFileSync('git', ['-C', dir, '-c', 'user.name=t', '-c', 'user.email=t@example.com', ...a], {
      encoding: 'utf8',
    }).trim();
  git('init', '-q');
  for (const [i, s] of subjects.entries()) {
    writeFileSync(join(dir, 'f'), String(i));
    git('add', 'f');
    git('commit', '-q', '-m', s);
  }
  return { dir, git };
}

describe('the changelog from the commits since the last release tag', () => {
  it('the first release, then the commits since its tag, newest first', () => {
    const { dir, git } = repoWith(['one', 'two']);
    git('tag', '0.1.0');
    expect(previousTag(dir, 'HEAD')).toBeUndefined();
    const first = changelogSection('0.1.0', '2026-11-27', commitsSince(dir, 'HEAD', undefined), undefined);
    expect(first).toMatch(/^## 0\.1\.0 \(2026-11-27\)\n\nThe first release: .* \(2 commits\)\.\n$/);
    writeFileSync(join(dir, 'g'), 'x');
    git('add', 'g');
    git('commit', '-q', '-m', 'Chart: three');
    git('commit', '-q', '--allow-empty', '-m', 'four');
    expect(previousTag(dir, 'HEAD')).toBe('0.1.0');
    const commits = commitsSince(dir, 'HEAD', '0.1.0');
    expect(commits.map((c) => c.subject)).toEqual(['four', 'Chart: three']);
    const second = changelogSection('0.2.0', '2026-11-28', commits, '0.1.0');
    expect(second.split('\n').slice(0, 5)).toEqual([
      '## 0.2.0 (2026-11-28)',
      '',
      '2 commits since 0.1.0:',
      '',
      `- four (${commits[0]?.hash})`,
    ]);
    const file = withSection(withSection(undefined, first), second);
    expect(file.indexOf('## 0.2.0')).toBeLessThan(file.indexOf('## 0.1.0'));
    expect(file.startsWith('# Changelog\n')).toBe(true);
    expect(() => withSection(file, second)).toThrow('CHANGELOG.md has a section ## 0.2.0 already');
  });
});
