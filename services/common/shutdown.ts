// SIGTERM / SIGINT: stop accepting, let in-flight requests finish, release resources in order, exit 0.
// A step that fails is logged and the rest still run; past the grace period the process exits 1.

import type { FastifyBaseLogger } from 'fastify';

export function installShutdown(opts: {
  log: FastifyBaseLogger;
  graceMs: number;
  steps: Array<() => Promise<unknown>>;
}): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    opts.log.info({ signal }, 'shutting down');
    const timer = setTimeout(() => {
      opts.log.error({ graceMs: opts.graceMs }, 'shutdown grace period exceeded');
      process.exit(1);
    }, opts.graceMs);
    timer.unref();
    let failed = false;
    for (const step of opts.steps) {
      try {
        await step();
      } catch (err) {
        failed = true;
        opts.log.error({ err }, 'shutdown step failed');
      }
    }
    process.exit(failed ? 1 : 0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}
