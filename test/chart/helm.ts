// Helm for the chart suite: the pinned binary, its caches in a temp directory, an optional kubeconfig.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHART_DIR } from '../../tools/stack/render-envoy.ts';
import { requireTool } from '../../tools/stack/tools.ts';

export { CHART_DIR };

export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

// Made on first use, not on import: a suite skipped for a missing tool imports this file too.
let home: string | undefined;

function helmHome(): string {
  home ??= mkdtempSync(join(tmpdir(), 'nsfwdetector-helm-'));
  return home;
}

/** Removes helm's caches (the suite's afterAll): a test leaves no temp dir behind. */
export function removeHelmHome(): void {
  if (home) rmSync(home, { recursive: true, force: true });
  home = undefined;
}

/** Runs helm; resolves with the exit code and both outputs (never rejects on a non-zero exit). */
export function helm(args: string[], opts: { kubeconfig?: string } = {}): Promise<HelmResult> {
  const home = helmHome();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
    KUBECONFIG: opts.kubeconfig ?? join(home, 'no-kubeconfig'),
  };
  return new Promise((resolve) => {
    execFile(requireTool('helm'), args, { env, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Like helm(), but rejects with stderr on failure. */
export async function helmOk(args: string[], opts: { kubeconfig?: string } = {}): Promise<HelmResult> {
  const result = await helm(args, opts);
  if (result.code !== 0) throw new Error(`helm ${args.join(' ')} failed (${result.code}):\n${result.stderr}`);
  return result;
}

/** `--set` arguments from a flat record. */
export function sets(values: Record<string, string | number | boolean>): string[] {
  return Object.entries(values).flatMap(([k, v]) => ['--set', `${k}=${v}`]);
}

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  // biome-ignore lint/suspicious/noExplicitAny: manifests are checked field by field in the tests
  spec?: any;
  data?: Record<string, string>;
}
