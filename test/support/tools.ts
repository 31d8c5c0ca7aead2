// Every external tool the suites, benchmarks and load tests run, found one way (tools/stack/tools.ts:
// its override variable, the tools cache, the PATH), and `describeWithTool`, the one way a suite declares
// them (`skipWithoutTool` for a single test).
//
//   describeWithTool(REDIS_SERVER, 'Redis stores', () => { … });
//   describeWithTool([K6, REDIS_SERVER], 'k6 quota scenario', () => { … });
//   export const ENVOY = tool('envoy', 'bash .ci/install-tools.sh');   // a new tool: one line
//
// All there: a plain `describe`. One missing: with CI=true the suite FAILS (CI must run it); otherwise
// it is skipped, and the run's summary (skip-reporter.ts) prints one line per skipped suite with the
// install command, and their count, just before vitest's own summary.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { libjpegUnavailable } from '../../services/detect/image/libjpeg/jpeg-tensor.ts';
import { executable, INSTALL_HINT as STACK_INSTALL, toolPath } from '../../tools/stack/tools.ts';

export interface Tool {
  /** The command, as the skip line names it. */
  name: string;
  /** How to install it (a command a newcomer can paste). */
  install: string;
  /** Where it is, or undefined when it is missing. */
  find(): string | undefined;
}

/**
 * A command found by tools/stack/tools.ts (`pinned`: never on the PATH), or the executable at `path`
 * when given (a tool in a venv of its own).
 */
export function tool(name: string, install: string, opts: { path?: string; pinned?: boolean } = {}): Tool {
  const { path, pinned } = opts;
  return {
    name,
    install,
    find: () => (path === undefined ? toolPath(name, { pinned }) : executable(path) ? path : undefined),
  };
}

/** The tool's path; throws with its install command when it is missing. */
export function requireTool(t: Tool): string {
  const path = t.find();
  if (path === undefined) throw new Error(`${t.name} is not installed: ${t.install}`);
  return path;
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
/** wasm-ld (lld): the edge's Wasm filter (edge/source-connection-limit) is linked with it. */
export const WASM_LD = tool('wasm-ld', `apt-get install lld  ${VIA_SCRIPT}`);
export const REDIS_SERVER = tool('redis-server', `apt-get install redis-server  ${VIA_SCRIPT}`);
/** `redis-cli --cluster` creates and reshards the test clusters (redis-tools, a dependency of redis-server). */
export const REDIS_CLI = tool('redis-cli', `apt-get install redis-tools  ${VIA_SCRIPT}`);
export const CHROMIUM = tool('chromium', `apt-get install -y chromium  ${VIA_SCRIPT}`);
/** Keep the version in step with .ci/install-tools.sh. */
export const K6_VERSION = 'v1.8.1';
export const K6 = tool('k6', `GOBIN=/usr/local/bin go install go.k6.io/k6@${K6_VERSION}  ${VIA_SCRIPT}`);
/** `promtool check metrics` (Debian's prometheus package), the real validator of the exposition format. */
export const PROMTOOL = tool('promtool', `apt-get install prometheus  ${VIA_SCRIPT}`);
// The stack's (tools/stack): pinned versions in the tools cache.
export const ENVOY = tool('envoy', STACK_INSTALL);
export const HELM = tool('helm', STACK_INSTALL);
export const JAEGER = tool('jaeger', STACK_INSTALL);
// The chart suites' Kubernetes: pinned, never whatever version is on the PATH.
const KUBE_INSTALL = 'bash .ci/install-tools.sh (kube-apiserver, etcd, kubectl, skaffold)';
export const KUBE_TOOLS = {
  'kube-apiserver': tool('kube-apiserver', KUBE_INSTALL, { pinned: true }),
  etcd: tool('etcd', KUBE_INSTALL, { pinned: true }),
  kubectl: tool('kubectl', KUBE_INSTALL, { pinned: true }),
  skaffold: tool('skaffold', KUBE_INSTALL, { pinned: true }),
} as const;

/** Set by run-guard.ts: where skipped suites are recorded for the summary. */
export const SKIPS_DIR_VAR = 'NSFWDETECTOR_TEST_SKIPS';

export interface SkipRecord {
  suite: string;
  file: string;
  tool: string;
  install: string;
}

const missingOf = (tools: Tool | Tool[]): Tool[] =>
  (Array.isArray(tools) ? tools : [tools]).filter((t) => t.find() === undefined);

const notInstalled = (missing: Tool[]): string =>
  missing.map((t) => `${t.name} is not installed (install: ${t.install})`).join('; ');

/** `describe`, when every tool in `tools` is installed; see the top of this file otherwise. */
export function describeWithTool(tools: Tool | Tool[], name: string, body: () => void): void {
  const missing = missingOf(tools);
  if (missing.length === 0) {
    describe(name, body);
    return;
  }
  const what = notInstalled(missing);
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

/**
 * Inside a test, for a tool only it needs: all there → nothing; one missing → with CI=true the test
 * fails, otherwise it is skipped and listed in the run's summary like a skipped suite.
 */
export function skipWithoutTool(
  ctx: { skip: (note?: string) => void; task: { name: string } },
  tools: Tool | Tool[],
) {
  const missing = missingOf(tools);
  if (missing.length === 0) return;
  const what = notInstalled(missing);
  if (process.env.CI === 'true') throw new Error(`${what}. CI=true requires this test.`);
  recordSkip(ctx.task.name, missing);
  ctx.skip(what);
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
