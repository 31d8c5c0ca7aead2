// `describe` for suites that need the stack's external tools (Envoy, Helm, Jaeger, redis-server, k6…).
// Missing tool: the suite fails under CI=true, and is skipped elsewhere with one line naming the
// install command (as describe-redis.ts does for redis-server).

import { describe, it } from 'vitest';
import { missingTools, type Tool } from '../../services/stack/tools.ts';
import { REDIS_INSTALL_HINT, redisServerPath } from './redis-server.ts';

/** What is missing of `tools` (plus redis-server when `redis`), as one line; undefined when nothing. */
export function missingStackTools(
  tools: readonly Tool[],
  opts: { redis?: boolean } = {},
): string | undefined {
  const missing = [missingTools(tools)];
  if (opts.redis && !redisServerPath()) missing.push(`redis-server not installed: ${REDIS_INSTALL_HINT}`);
  const text = missing.filter(Boolean).join('; ');
  return text || undefined;
}

export function describeWithStackTools(
  name: string,
  tools: readonly Tool[],
  opts: { redis?: boolean },
  body: () => void,
): void {
  const missing = missingStackTools(tools, opts);
  if (missing === undefined) {
    describe(name, body);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it('needs its tools', () => {
        throw new Error(`${missing}; CI=true requires this suite`);
      });
    });
    return;
  }
  console.warn(`[skipped] ${name}: ${missing}`);
  describe.skip(name, body);
}
