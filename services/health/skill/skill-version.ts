// skill_version has one source of truth: the `__version__` line of the published CLI itself.

import { readFileSync } from 'node:fs';

export const CLI_PATH = new URL('./nsfwdetector.py', import.meta.url);

function readCliVersion(): string {
  const source = readFileSync(CLI_PATH, 'utf8');
  const match = /^__version__\s*=\s*["']([^"']+)["']/m.exec(source);
  if (!match?.[1]) throw new Error(`No __version__ line in ${CLI_PATH.pathname}`);
  return match[1];
}

export const SKILL_VERSION: string = readCliVersion();
