// Runs the quota service's thin server (services/quota/server.ts) as a child process on a free port.

import { type ServerProcess, spawnService } from './server-process.ts';

export function startQuotaServer(env: Record<string, string> = {}): Promise<ServerProcess> {
  return spawnService({
    entry: 'services/quota/server.ts',
    portVar: 'QUOTA_PORT',
    env: { LOG_LEVEL: 'warn', ...env },
  });
}
