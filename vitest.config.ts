import { defineConfig } from 'vitest/config';
import DurationsReporter from './test/support/durations-reporter.ts';
import SkipReporter from './test/support/skip-reporter.ts';

// One local Kubernetes node per machine: its suites run one file at a time, after everything else.
const KUBE_SUITES = 'test/kube/**/*.test.ts';

export default defineConfig({
  test: {
    // Model sessions and real servers are heavy on 2 cores: keep file-level parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // The run's temp dir and its final check: no child left running, no temp dir left behind.
    globalSetup: ['test/support/run-guard.ts'],
    // Per file: its own temp dir, its children and temp dirs checked after its hooks.
    setupFiles: ['test/support/file-guard.ts'],
    // Skipped suites (missing tools) listed, and counted, before the summary; then each project's wall
    // time and the slowest files (also into .ci/run's closing table).
    reporters: [new SkipReporter(), new DurationsReporter()],
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: [
            'services/**/*.test.ts',
            'lib/**/*.test.ts',
            'tools/**/*.test.ts',
            'models/**/*.test.ts',
            'edge/**/*.test.ts',
            'test/**/*.test.ts',
          ],
          exclude: [KUBE_SUITES],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'kube', include: [KUBE_SUITES], fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
