// SIGTERM / SIGINT: stop accepting, let in-flight requests finish, release resources in order, exit 0.
// A step that fails is logged and the rest still run; past the grace period the process exits 1.

import type { FastifyBaseLogger } from 'fastify';
import { stuckThreadCount } from './stuck-threads.ts';

/**
 * Ends the process with `code`, or — when a thread is stuck in native code, which process.exit() would
 * wait for forever — with SIGKILL, so that the grace period holds whatever the threads do.
 */
export function exitProcess(log: FastifyBaseLogger, code: number): void {
  const stuck = stuckThreadCount();
  if (stuck === 0) process.exit(code);
  log.error({ stuck }, 'exiting by SIGKILL: threads stuck in native code cannot be joined');
  // The logger writes asynchronously: a moment for the line above (and those before it) to reach
  // the output before the process is gone.
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), LOG_WRITE_MS);
}

const LOG_WRITE_MS = 100;

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
      exitProcess(opts.log, 1);
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
    exitProcess(opts.log, failed ? 1 : 0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}
