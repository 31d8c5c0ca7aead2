// Runs the quota service's thin server (services/quota/server.ts) as a child process on a free port.

import { RedisServer } from './redis-server.ts';
import { type ServerProcess, spawnService } from './server-process.ts';

export function startQuotaServer(env: Record<string, string> = {}): Promise<ServerProcess> {
  return spawnService({
    entry: 'services/quota/server.ts',
    portVar: 'QUOTA_PORT',
    env: { LOG_LEVEL: 'warn', ...env },
  });
}

/**
 * The edge suites' quota service: on a Redis of its own, behind one proxy hop (Envoy), anonymous
 * callers allowed `anonLimit` a minute and a day so that only the charges under test count.
 */
export async function startEdgeQuota(
  anonLimit: number,
): Promise<{ redis: RedisServer; quota: ServerProcess }> {
  const redis = await RedisServer.start();
  try {
    const quota = await startQuotaServer({
      REDIS_URL: redis.url,
      TRUSTED_PROXY_HOPS: '1',
      ANON_PER_MINUTE: String(anonLimit),
      ANON_PER_DAY: String(anonLimit),
    });
    return { redis, quota };
  } catch (err) {
    await redis.stop();
    throw err;
  }
}
