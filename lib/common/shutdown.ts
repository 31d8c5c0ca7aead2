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

/**
 * On SIGTERM / SIGINT runs `steps` in order under the grace timer, then exits (0, or 1 when a step
 * failed). Returns the same stop for the process itself to call (`code` 1: a part failed for good).
 */
export function installShutdown(opts: {
  log: FastifyBaseLogger;
  graceMs: number;
  steps: Array<() => unknown>;
}): (reason: string, code?: number) => Promise<void> {
  let stopping = false;
  const stop = async (reason: string, code = 0) => {
    if (stopping) return;
    stopping = true;
    opts.log.info({ reason }, 'shutting down');
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
    exitProcess(opts.log, failed ? 1 : code);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  return stop;
}
