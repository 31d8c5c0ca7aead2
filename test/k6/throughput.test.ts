// Smoke run of loadtests/throughput.js (a few seconds): the scenario works end to end and prints its
// figures. The real measurement is `npm run loadtest:throughput` (20 s by default).

import { expect, it } from 'vitest';
import { runThroughput } from '../../loadtests/run.ts';
import { describeWithTool, K6, REDIS_SERVER } from '../support/tools.ts';

describeWithTool([K6, REDIS_SERVER], 'k6 throughput scenario', () => {
  it('prints req/s and p50/p95 with every request answered', { timeout: 180_000 }, async () => {
    const { exitCode, output } = await runThroughput({ vus: 2, duration: '5s' });
    if (exitCode !== 0) console.error(output);
    expect(exitCode, 'k6 exit code (output above)').toBe(0);
    expect(output).toMatch(
      /detect throughput \(\/api\/open\/detect, 2 VUs, [\d.]+ s\): [\d.]+ req\/s, p50 [\d.]+ ms, p95 [\d.]+ ms/,
    );
  });
});
