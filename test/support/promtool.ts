// `promtool check metrics` (Debian's prometheus package), the real validator of the exposition format.
// A test that needs it calls skipWithoutTool(ctx, PROMTOOL) first (tools.ts).

import { spawnSync } from 'node:child_process';
import { PROMTOOL, requireTool } from './tools.ts';

/** Runs promtool on an exposition; returns its exit status and what it printed. */
export function promtoolCheck(exposition: string): { status: number | null; output: string } {
  const result = spawnSync(requireTool(PROMTOOL), ['check', 'metrics'], {
    input: exposition,
    encoding: 'utf8',
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** GET /metrics, validated by promtool (which must exit 0), as text. */
export async function scrapeValidated(baseUrl: string): Promise<string> {
  const res = await fetch(`${baseUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET ${baseUrl}/metrics: ${res.status}`);
  if (!res.headers.get('content-type')?.startsWith('text/plain; version=0.0.4'))
    throw new Error(`unexpected content-type ${res.headers.get('content-type')}`);
  const text = await res.text();
  const { status, output } = promtoolCheck(text);
  if (status !== 0) throw new Error(`promtool check metrics failed (${status}):\n${output}`);
  return text;
}
