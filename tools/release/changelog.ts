// CHANGELOG.md's section for a release, from the commits since the last release tag (the newest tag
// X.Y.Z reachable from the release's commit): one line per commit, its subject and short hash, oldest
// last as `git log` lists them. The first release (no tag before it) gets one line saying what it holds.
// usage: tsx tools/release/changelog.ts --version X.Y.Z [--ref REF] [--write]
// (without --write: the section on stdout; with it: added at the top of CHANGELOG.md, once).

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export const RELEASE_TAG = /^\d+\.\d+\.\d+$/;
const HEADER =
  "# Changelog\n\nEach release's section lists the commits since the release before it (tools/release/changelog.ts, docs/releasing.md).\n";

export interface Commit {
  hash: string;
  subject: string;
}

/** The section for `version`, released on `date` (YYYY-MM-DD), from `commits` since `previous`. */
export function changelogSection(
  version: string,
  date: string,
  commits: Commit[],
  previous: string | undefined,
): string {
  const lines = [`## ${version} (${date})`, ''];
  if (previous === undefined)
    lines.push(
      `The first release: the project as of ${commits[0]?.hash ?? 'its first commit'} (${commits.length} commits).`,
    );
  else if (commits.length === 0) lines.push(`No change since ${previous}.`);
  else {
    lines.push(`${commits.length} commit${commits.length === 1 ? '' : 's'} since ${previous}:`, '');
    for (const c of commits) lines.push(`- ${c.subject} (${c.hash})`);
  }
  return `${lines.join('\n')}\n`;
}

/** `changelog` with `section` first under the header; an error if that version is there already. */
export function withSection(changelog: string | undefined, section: string): string {
  const heading = section.split('\n')[0]?.replace(/ \(.*$/, '') ?? '';
  const body = (changelog ?? HEADER).replace(/\n*$/, '\n');
  if (body.split('\n').some((l) => l.replace(/ \(.*$/, '') === heading))
    throw new Error(`CHANGELOG.md has a section ${heading} already`);
  const at = body.indexOf('\n## ');
  return at === -1 ? `${body}\n${section}` : `${body.slice(0, at + 1)}${section}\n${body.slice(at + 1)}`;
}

const git = (repo: string, ...args: string[]) =>
  execFileSync('git', ['-C', repo, ...args], { encoding: 'utf8' }).trim();

/** The newest release tag reachable from `ref` (excluding `ref` itself when it is tagged), if any. */
export function previousTag(repo: string, ref: string): string | undefined {
  const tags = git(repo, 'tag', '--merged', ref, '--sort=-v:refname')
    .split('\n')
    .filter((t) => RELEASE_TAG.test(t));
  const own = new Set(git(repo, 'tag', '--points-at', ref).split('\n'));
  return tags.find((t) => !own.has(t));
}

/** The commits in `ref` since `previous` (all of them when undefined), newest first. */
export function commitsSince(repo: string, ref: string, previous: string | undefined): Commit[] {
  const out = git(repo, 'log', '--format=%h%x09%s', previous ? `${previous}..${ref}` : ref);
  return out === ''
    ? []
    : out.split('\n').map((line) => {
        const [hash, ...subject] = line.split('\t');
        return { hash: hash as string, subject: subject.join('\t') };
      });
}

function main(): void {
  const { values } = parseArgs({
    options: {
      version: { type: 'string' },
      ref: { type: 'string', default: 'HEAD' },
      write: { type: 'boolean' },
    },
  });
  const version = values.version ?? '';
  if (!RELEASE_TAG.test(version)) throw new Error(`--version takes X.Y.Z, not "${version}"`);
  const repo = process.cwd();
  const previous = previousTag(repo, values.ref);
  const date = git(repo, 'log', '-1', '--format=%cs', values.ref);
  const section = changelogSection(version, date, commitsSince(repo, values.ref, previous), previous);
  if (!values.write) {
    process.stdout.write(section);
    return;
  }
  const file = join(repo, 'CHANGELOG.md');
  writeFileSync(file, withSection(existsSync(file) ? readFileSync(file, 'utf8') : undefined, section));
  console.log(`changelog: CHANGELOG.md, section ${version} (since ${previous ?? 'the first commit'})`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
