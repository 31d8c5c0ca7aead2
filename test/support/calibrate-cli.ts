// The calibration tool as `npm run calibrate` runs it: the real CLI in a child process, from the
// repository root.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { childEnv } from './children.ts';
import { ROOT } from './server-process.ts';

const run = promisify(execFile);

/** `npm run calibrate -- <args>`; rejects with the exit code and stderr when it fails. */
export function calibrateCli(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, ['--import', 'tsx', 'tools/calibrate/main.ts', ...args], {
    cwd: ROOT,
    env: { ...childEnv(), TSX_DISABLE_CACHE: '1', LOG_LEVEL: 'warn' },
  });
}

/** Calibrates on the nsfw and sfw folders of `dir` (labelledCorpus), the report in `<dir>/report`. */
export async function calibrateCorpus(
  dir: string,
  args: string[],
): Promise<{ stdout: string; stderr: string; out: string }> {
  const out = join(dir, 'report');
  const result = await calibrateCli([
    '--nsfw',
    join(dir, 'nsfw'),
    '--sfw',
    join(dir, 'sfw'),
    '--out',
    out,
    ...args,
  ]);
  return { ...result, out };
}
