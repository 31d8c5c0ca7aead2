// Renders the chart's Envoy configuration (charts/nsfwdetector/files/envoy.yaml.tpl) with `helm
// template`, exactly as a deployment would, and returns the JSON document the ConfigMap holds.

import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { FILTER_WASM } from '../../edge/source-connection-limit/build.ts';
import { requireTool } from './tools.ts';

const execFileAsync = promisify(execFile);

export const CHART_DIR = fileURLToPath(new URL('../../charts/nsfwdetector/', import.meta.url));
export const LOCAL_VALUES = `${CHART_DIR}values-local.yaml`;
/** Envoy on this machine loads the per-source connection bound's filter from the chart's own file. */
export const LOCAL_FILTER_VALUES = { 'envoy.sourceConnectionLimit.filename': FILTER_WASM } as const;

/** Envoy's bootstrap configuration, as JSON (Envoy reads it as YAML). */
export type EnvoyConfig = Record<string, unknown>;

/**
 * `helm template` of the Envoy ConfigMap with the given values files and `--set` overrides; the text
 * under `data."envoy.yaml"`, byte for byte what the gateway pods mount (the stack writes this text).
 */
export async function renderEnvoyConfigText(
  opts: { valuesFiles?: string[]; set?: Record<string, string | number> } = {},
): Promise<string> {
  const args = ['template', 'nsfwdetector', CHART_DIR, '--show-only', 'templates/envoy-configmap.yaml'];
  for (const file of opts.valuesFiles ?? []) args.push('--values', file);
  for (const [key, value] of Object.entries(opts.set ?? {})) args.push('--set', `${key}=${value}`);
  const { stdout } = await execFileAsync(requireTool('helm'), args, { maxBuffer: 16 * 1024 * 1024 });
  return blockScalar(stdout, 'envoy.yaml');
}

/** The same configuration, parsed. */
export async function renderEnvoyConfig(
  opts: { valuesFiles?: string[]; set?: Record<string, string | number> } = {},
): Promise<EnvoyConfig> {
  return JSON.parse(await renderEnvoyConfigText(opts)) as EnvoyConfig;
}

/** The literal block scalar `key: |` of a rendered manifest (our own template: 4-space indent). */
function blockScalar(manifest: string, key: string): string {
  const lines = manifest.split('\n');
  const start = lines.findIndex((l) => l.trimEnd() === `  ${key}: |`);
  if (start < 0) throw new Error(`rendered chart has no ${key} block:\n${manifest}`);
  const body: string[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.trim() !== '' && !line.startsWith('    ')) break;
    body.push(line.slice(4));
  }
  // A `|` block keeps exactly one final newline (YAML "clip"): the value the ConfigMap holds.
  while (body.length && body.at(-1)?.trim() === '') body.pop();
  return `${body.join('\n')}\n`;
}
