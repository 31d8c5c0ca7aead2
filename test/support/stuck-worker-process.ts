// A process for the shutdown test (test/stuck-worker-shutdown.test.ts), never part of a service: a
// scoring pool of one stand-in worker (hanging-scorer-worker.mjs) blocked in native code on the FIFO
// given as argv[2], and the services' own shutdown handling. Prints "held" once the worker is blocked.

import { existsSync } from 'node:fs';
import Fastify from 'fastify';
import { installShutdown } from '../../lib/common/shutdown.ts';
import { DEFAULT_DIMENSION_LIMITS } from '../../services/detect/image/types.ts';
import { WorkerPoolScorer } from '../../services/detect/scoring/worker-pool-scorer.ts';

const fifo = process.argv[2];
if (!fifo) throw new Error('usage: stuck-worker-process.ts <fifo>');
const { log } = Fastify({ logger: true });
const pool = await WorkerPoolScorer.create({
  model: 'mobilenet_v2',
  workers: 1,
  intraOpThreads: 1,
  limits: DEFAULT_DIMENSION_LIMITS,
  entry: new URL('./hanging-scorer-worker.mjs', import.meta.url),
  // Never reached here: the shutdown, not the deadline, finds the blocked thread.
  deadlineMs: 600_000,
  onWorkerError: (err) => log.error({ err }, 'scoring worker replaced'),
});
installShutdown({ log, graceMs: 10_000, steps: [() => pool.close()] });
pool
  .score(new TextEncoder().encode(fifo), { format: 'png', width: 22, height: 10, frames: 1 })
  .catch(() => {});
while (!existsSync(`${fifo}.held`)) await new Promise((r) => setTimeout(r, 10));
console.log('held');
// Keeps the event loop alive, as a server's listening socket would.
setInterval(() => {}, 60_000);
