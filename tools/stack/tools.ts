// Where external tools live — the stack's, and every other one a test, benchmark or load test runs
// (test/support/tools.ts names them): the tool's override variable (ENVOY_BIN, HELM_BIN, JAEGER_BIN,
// PROMTOOL_BIN, K6_BIN, …: the name in capitals, `-` as `_`, then `_BIN`), else the cache
// .ci/install-tools.sh fills (pinned versions), else the PATH.

import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export const TOOLS_DIR =
  process.env.NSFWDETECTOR_TOOLS_DIR ?? join(homedir(), '.cache', 'nsfwdetector-tools');
export const INSTALL_HINT = 'bash .ci/install-tools.sh';

export type Tool = 'envoy' | 'helm' | 'jaeger' | 'promtool' | 'k6';

/** The variable that names a tool's binary instead of the lookup: `redis-server` → REDIS_SERVER_BIN. */
const overrideVariable = (tool: string): string => `${tool.toUpperCase().replaceAll('-', '_')}_BIN`;

/** Whether `path` is a file this process may execute. */
export function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The tool's path, or undefined when it is not installed. `pinned`: the override or the cache only,
 * never the PATH (a kubectl that happens to be on a machine is some other version).
 */
export function toolPath(tool: string, opts: { pinned?: boolean } = {}): string | undefined {
  const override = process.env[overrideVariable(tool)];
  if (override) return executable(override) ? override : undefined;
  const cached = join(TOOLS_DIR, 'bin', tool);
  if (executable(cached)) return cached;
  if (opts.pinned) return undefined;
  try {
    return execFileSync('sh', ['-c', `command -v '${tool}'`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The tool's path; throws with the install command when it is missing. */
export function requireTool(tool: Tool): string {
  const path = toolPath(tool);
  if (!path) throw new Error(`${tool} is not installed: ${INSTALL_HINT}`);
  return path;
}

/** The tools (of those given) that are missing, as one line naming the install command; or undefined. */
export function missingTools(tools: readonly Tool[]): string | undefined {
  const missing = tools.filter((t) => !toolPath(t));
  return missing.length ? `${missing.join(', ')} not installed: ${INSTALL_HINT}` : undefined;
}
