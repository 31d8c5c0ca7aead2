// `promtool check metrics` (Debian's prometheus package), the real validator of the exposition format.
// Missing: with CI=true the suite fails, elsewhere it is skipped with the install line.

import { execFileSync, spawnSync } from 'node:child_process';

export const PROMTOOL_INSTALL_HINT = 'apt-get install prometheus  (or: bash .ci/install-tools.sh)';

export function promtoolPath(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Runs promtool on an exposition; returns its exit status and what it printed. */
export function promtoolCheck(exposition: string): { status: number | null; output: string } {
  const bin = promtoolPath();
  if (!bin) throw new Error(`promtool is not installed: ${PROMTOOL_INSTALL_HINT}`);
  const result = spawnSync(bin, ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/**
 * Inside a test: promtool present → true; missing → under CI=true the test fails, elsewhere it is
 * skipped with the install line.
 */
export function requirePromtool(ctx: { skip: (note?: string) => void }): void {
  if (promtoolPath()) return;
  const message = `promtool is not installed. Install it with: ${PROMTOOL_INSTALL_HINT}`;
  if (process.env.CI === 'true') throw new Error(`${message} (CI=true requires it)`);
  console.warn(`[skipped] ${message}`);
  ctx.skip(message);
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
