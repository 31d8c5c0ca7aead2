// A CPU hog beside a phase of the node suites, as a CI machine busy with other work has: one
// `yes > /dev/null` per core at nice 0 (absolute: whatever this process's niceness), the node's
// components and pods at theirs (tools/kube-node/env.sh: nice 0 unless NSFWDETECTOR_KUBE_NICE says
// otherwise), so every one of them gets about half the CPU it would have. Children of this run
// (children.ts): a phase starts it and stops it in its `finally`, and the run's guards kill whatever a
// phase that died left.

import { availableParallelism, setPriority } from 'node:os';
import { spawnChild } from './children.ts';

export interface CpuHog {
  /** How many `yes` processes: one per core. */
  readonly processes: number;
  /** Kills every one of them; resolves once they are gone. */
  stop(): Promise<void>;
}

export function startCpuHog(processes = availableParallelism()): CpuHog {
  const hogs = Array.from({ length: processes }, (_, i) => {
    // Its output to /dev/null, not to a pipe the test would have to read.
    const hog = spawnChild(`cpu hog ${i + 1}/${processes}`, 'sh', ['-c', 'exec yes >/dev/null']);
    setPriority(hog.pid, 0);
    return hog;
  });
  return {
    processes,
    stop: async () => {
      await Promise.all(hogs.map((h) => h.kill()));
    },
  };
}
