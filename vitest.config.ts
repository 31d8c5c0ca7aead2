import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['services/**/*.test.ts', 'models/**/*.test.ts', 'test/**/*.test.ts'],
    // Model sessions and real servers are heavy on 2 cores: keep file-level parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
  },
});
