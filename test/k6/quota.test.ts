// CI gate for loadtests/quota.js: k6 against the embedded server on a real redis-server, with
// test-sized limits. k6 exits non-zero on any wrong count, code or header (its checks and thresholds);
// this test asserts the exit code and shows k6's output when it fails. Takes up to about 75 s, most
// of it waiting for the next UTC minute. k6 or redis-server missing: fails under CI=true, else skipped.

import { expect, it } from 'vitest';
import { runQuota } from '../../loadtests/run.ts';
import { describeWithTool, K6, REDIS_SERVER } from '../support/tools.ts';

describeWithTool([K6, REDIS_SERVER], 'k6 quota scenario', () => {
  it('counts, refuses and labels every request exactly per tier', { timeout: 300_000 }, async () => {
    const { exitCode, output } = await runQuota();
    if (exitCode !== 0) console.error(output);
    expect(exitCode, 'k6 exit code (output above)').toBe(0);
    expect(output).toMatch(/checks_succeeded\.*: 100\.00%/);
  });
});
