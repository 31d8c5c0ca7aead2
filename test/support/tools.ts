// External tools the suites need, and `describeWithTool`, the one way a suite declares them.
//
//   describeWithTool(REDIS_SERVER, 'Redis stores', () => { … });
//   describeWithTool([K6, REDIS_SERVER], 'k6 quota scenario', () => { … });
//   export const ENVOY = tool('envoy', 'bash .ci/install-tools.sh');   // a new tool: one line
//
// All there: a plain `describe`. One missing: with CI=true the suite FAILS (CI must run it); otherwise
// it is skipped, and the run's summary (skip-reporter.ts) prints one line per skipped suite with the
// install command, and their count, just before vitest's own summary.

import { execFileSync } from 'node:child_process';
import { accessSync, constants, mkdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { libjpegUnavailable } from '../../services/detect/image/libjpeg/jpeg-tensor.ts';

export interface Tool {
  /** The command, as the skip line names it. */
  name: string;
  /** How to install it (a command a newcomer can paste). */
  install: string;
  /** Where it is, or undefined when it is missing. */
  find(): string | undefined;
}

/** A tool found on PATH (or at `path`, when given). */
export function tool(name: string, install: string, path?: string): Tool {
  return {
    name,
    install,
    find: () => (path === undefined ? onPath(name) : executable(path) ? path : undefined),
  };
}

/** The command's path on PATH, or undefined. */
export function onPath(command: string): string | undefined {
  try {
    return execFileSync('sh', ['-c', `command -v '${command}'`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const VIA_SCRIPT = '(or: bash .ci/install-tools.sh)';

/** The JPEG fast path's addon (built by `npm install`'s postinstall when a C compiler and libjpeg's headers exist). */
export const JPEG_TENSOR_ADDON: Tool = {
  name: 'jpeg-tensor.node (the libjpeg fast path)',
  install: `apt-get install gcc libc6-dev libjpeg62-turbo-dev && npm run build:native  ${VIA_SCRIPT}`,
  find: () =>
    libjpegUnavailable() === undefined ? 'services/detect/image/libjpeg/build/jpeg-tensor.node' : undefined,
};
/** cc with libjpeg's headers: test/jpeg-space compiles its JPEG writer against the system libjpeg. */
export const C_COMPILER = tool('cc', `apt-get install gcc libc6-dev libjpeg62-turbo-dev  ${VIA_SCRIPT}`);
/** clang with libFuzzer and the sanitizer runtimes: test/fuzz builds the native decoder's fuzz target. */
export const CLANG = tool('clang', `apt-get install clang libclang-rt-14-dev  ${VIA_SCRIPT}`);
export const REDIS_SERVER = tool('redis-server', `apt-get install redis-server  ${VIA_SCRIPT}`);
/** `redis-cli --cluster` creates and reshards the test clusters (redis-tools, a dependency of redis-server). */
export const REDIS_CLI = tool('redis-cli', `apt-get install redis-tools  ${VIA_SCRIPT}`);
export const CHROMIUM = tool('chromium', `apt-get install -y chromium  ${VIA_SCRIPT}`, '/usr/bin/chromium');
/** Keep the version in step with .ci/install-tools.sh (and loadtests/run.ts). */
export const K6: Tool = {
  ...tool('k6', `GOBIN=/usr/local/bin go install go.k6.io/k6@v1.8.1  ${VIA_SCRIPT}`),
  find: () => process.env.K6_BIN || onPath('k6'),
};

/** Set by run-guard.ts: where skipped suites are recorded for the summary. */
export const SKIPS_DIR_VAR = 'NSFWDETECTOR_TEST_SKIPS';

export interface SkipRecord {
  suite: string;
  file: string;
  tool: string;
  install: string;
}

/** `describe`, when every tool in `tools` is installed; see the top of this file otherwise. */
export function describeWithTool(tools: Tool | Tool[], name: string, body: () => void): void {
  const missing = (Array.isArray(tools) ? tools : [tools]).filter((t) => t.find() === undefined);
  if (missing.length === 0) {
    describe(name, body);
    return;
  }
  const what = missing.map((t) => `${t.name} is not installed (install: ${t.install})`).join('; ');
  if (process.env.CI === 'true') {
    describe(name, () => {
      it(`needs ${missing.map((t) => t.name).join(', ')}`, () => {
        throw new Error(`${what}. CI=true requires this suite.`);
      });
    });
    return;
  }
  recordSkip(name, missing);
  describe.skip(name, body);
}

function recordSkip(suite: string, missing: Tool[]): void {
  const file = relative(process.cwd(), expect.getState().testPath ?? '');
  const dir = process.env[SKIPS_DIR_VAR];
  const records: SkipRecord[] = [
    {
      suite,
      file,
      tool: missing.map((t) => t.name).join(', '),
      install: missing.map((t) => t.install).join('; '),
    },
  ];
  if (dir === undefined) {
    // Not under this repository's vitest config (no summary): say it here.
    for (const r of records)
      console.warn(`[skipped] ${r.suite}: ${r.tool} is not installed. Install it with: ${r.install}`);
    return;
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, `${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.json`),
    JSON.stringify(records),
  );
}
