// vitest's default reporter, plus one line per suite skipped for a missing tool (recorded by
// describeWithTool, tools.ts) and their count, printed just before vitest's own summary.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DefaultReporter } from 'vitest/node';
import { SKIPS_DIR_VAR, type SkipRecord } from './tools.ts';

export function readSkips(dir: string | undefined): SkipRecord[] {
  if (dir === undefined) return [];
  let files: string[] = [];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  return files.flatMap((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as SkipRecord[]);
}

export default class SkipReporter extends DefaultReporter {
  override onTestRunEnd(...args: Parameters<DefaultReporter['onTestRunEnd']>): void {
    const skips = readSkips(process.env[SKIPS_DIR_VAR]);
    const suites = [...new Set(skips.map((s) => `${s.suite} (${s.file})`))];
    if (suites.length > 0) {
      this.ctx.logger.log('');
      for (const s of skips) {
        this.ctx.logger.log(` ↓ skipped: ${s.suite} (${s.file}): needs ${s.tool}; install: ${s.install}`);
      }
      this.ctx.logger.log(
        ` ${suites.length} suite${suites.length === 1 ? '' : 's'} skipped: ${suites.join(', ')}`,
      );
    }
    super.onTestRunEnd(...args);
  }
}
