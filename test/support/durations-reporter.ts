// What the run's time went on, printed after vitest's summary: each project's wall time (its first file
// started to its last file ended) and the files that took longest (tests and hooks, import and setup).
// Under .ci/run the same lines are appended to $CI_TIMES, which .ci/run prints with its own steps'.

import { appendFileSync } from 'node:fs';
import { relative } from 'node:path';
import { experimental_getRunnerTask, type Reporter, type TestModule } from 'vitest/node';
import { REPO } from './paths.ts';

/** Files at or above this many seconds are listed one by one. */
const SLOW_FILE_SECONDS = 20;

const secondsOf = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

export default class DurationsReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    // Each project's span: from its first file's start to its last file's end (the workers' clocks).
    const spans = new Map<string, { first: number; last: number }>();
    for (const m of modules) {
      const result = experimental_getRunnerTask(m).result;
      if (result?.startTime === undefined) continue;
      const d = m.diagnostic();
      // startTime is when its tests began: the import and setup came before.
      const start =
        result.startTime -
        (d.collectDuration + d.setupDuration + d.environmentSetupDuration + d.prepareDuration);
      const end = result.startTime + (result.duration ?? 0);
      const span = spans.get(m.project.name);
      spans.set(m.project.name, {
        first: Math.min(span?.first ?? start, start),
        last: Math.max(span?.last ?? end, end),
      });
    }
    const files = modules
      .map((m) => {
        const d = m.diagnostic();
        return {
          file: relative(REPO, m.moduleId),
          project: m.project.name,
          ms:
            d.duration + d.collectDuration + d.setupDuration + d.environmentSetupDuration + d.prepareDuration,
        };
      })
      .sort((a, b) => b.ms - a.ms);
    const lines = [
      ...[...spans].map(
        ([project, s]) =>
          `vitest project ${project}: ${secondsOf(s.last - s.first)} (wall, first file to last)`,
      ),
      ...files
        .filter((f) => f.ms >= SLOW_FILE_SECONDS * 1000)
        .map((f) => `vitest ${f.project} ${f.file}: ${secondsOf(f.ms)}`),
      `vitest: ${files.filter((f) => f.ms < SLOW_FILE_SECONDS * 1000).length} more files under ${SLOW_FILE_SECONDS} s each`,
    ].map((l) => `ci-time: ${l}`);
    process.stdout.write(`\n${lines.join('\n')}\n`);
    const out = process.env.CI_TIMES;
    if (out) appendFileSync(out, `${lines.join('\n')}\n`);
  }
}
