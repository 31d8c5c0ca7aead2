// `describe` for suites that need a real redis-server (see redis-server.ts).

import { describe, it } from 'vitest';
import { REDIS_INSTALL_HINT, redisServerPath } from './redis-server.ts';

/**
 * `describe` for suites that need redis-server. Missing binary: fails under CI=true, skips otherwise
 * (with a message on stderr), so nobody mistakes a skipped suite for a passing one in CI.
 */
export function describeRedis(name: string, body: () => void): void {
  if (redisServerPath() !== undefined) {
    describe(name, body);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it('needs redis-server', () => {
        throw new Error(
          `redis-server is not installed, and CI=true requires this suite: ${REDIS_INSTALL_HINT}`,
        );
      });
    });
    return;
  }
  console.warn(`[skipped] ${name}: redis-server is not installed. Install it with: ${REDIS_INSTALL_HINT}`);
  describe.skip(name, body);
}
