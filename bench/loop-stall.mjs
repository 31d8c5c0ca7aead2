// Preloaded into the fairness bench's server (NODE_OPTIONS=--import, bench/fairness.ts): the event
// loop's longest delay in each 250 ms window, appended to LOOP_STALL_FILE as JSON lines
// [epoch ms, longest delay ms], so that the bench can take the longest within a phase. Only in the
// server's main thread: decoder processes and scoring worker threads load it too, and skip.
import { appendFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { isMainThread } from 'node:worker_threads';

const file = process.env.LOOP_STALL_FILE;
if (file && isMainThread && process.argv[1]?.endsWith('all-in-one/server.ts')) {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  setInterval(() => {
    appendFileSync(file, `${JSON.stringify([Date.now(), delay.max / 1e6])}\n`);
    delay.reset();
  }, 250).unref();
}
