// Preloaded into the fairness bench's server (NODE_OPTIONS=--import, bench/fairness.ts): the event
// loop's longest delay in each 250 ms window and the longest garbage-collection pause in it, appended to
// LOOP_STALL_FILE as JSON lines [epoch ms, longest delay ms, longest GC ms, that GC's kind, the main
// thread's CPU ms in the window], so that the bench can take the longest within a phase and say how much
// of it was the collector, and whether the thread was working or waiting for a core. Only in the
// server's main thread: decoder processes and scoring worker threads load it too, and skip.
import { appendFileSync } from 'node:fs';
import { constants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { isMainThread } from 'node:worker_threads';

const file = process.env.LOOP_STALL_FILE;
if (file && isMainThread && process.argv[1]?.endsWith('all-in-one/server.ts')) {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const KINDS = {
    [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
    [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking',
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
  };
  let gc = [0, ''];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries())
      if (entry.duration > gc[0]) gc = [entry.duration, KINDS[entry.detail?.kind] ?? 'other'];
  }).observe({ entryTypes: ['gc'] });
  let cpu = process.threadCpuUsage();
  setInterval(() => {
    const used = process.threadCpuUsage(cpu);
    cpu = process.threadCpuUsage();
    const cpuMs = (used.user + used.system) / 1000;
    appendFileSync(file, `${JSON.stringify([Date.now(), delay.max / 1e6, gc[0], gc[1], cpuMs])}\n`);
    delay.reset();
    gc = [0, ''];
  }, 250).unref();
}
