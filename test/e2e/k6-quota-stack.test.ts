// The k6 quota scenario (loadtests/quota.js) against the cluster stack's edge: the limits are exact
// through Envoy and ext_authz, not only in process (test/k6/quota.test.ts runs it on the embedded
// server). Takes up to about 75 s, most of it waiting for the next UTC minute.

import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { QUOTA_LIMITS, runQuotaOn } from '../../loadtests/run.ts';
import { type Stack, startStack } from '../../tools/stack/stack.ts';
import { childEnv } from '../support/children.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

// As loadtests/run.ts: this scenario is about counts, codes and headers, not the store-timeout path
// (tested in stack.test.ts); the 100 ms default Redis bound trips now and then on a busy shared machine.
const ENV = { ...QUOTA_LIMITS, LOG_LEVEL: 'warn', REDIS_COMMAND_TIMEOUT_MS: '1000' };

describeWithStackTools(
  'k6 quota scenario through the stack edge',
  ['helm', 'envoy', 'jaeger', 'k6'],
  { redis: true },
  () => {
    let stack: Stack;
    beforeAll(async () => {
      stack = await startStack({ port: 0, env: childEnv({ ...process.env, ...ENV }) });
      // The stack's own readiness probe was an anonymous detect from this machine: start from zero.
      const redis = new Redis(stack.redisUrl);
      try {
        await redis.flushall();
      } finally {
        redis.disconnect();
      }
    }, 300_000);
    afterAll(async () => {
      await stack?.stop();
    }, 60_000);

    it('counts, refuses and labels every request exactly per tier, through Envoy', {
      timeout: 300_000,
    }, async () => {
      const { exitCode, output } = await runQuotaOn(stack.edgeUrl, { ...ENV, REDIS_URL: stack.redisUrl });
      if (exitCode !== 0) console.error(output);
      expect(exitCode, 'k6 exit code (output above)').toBe(0);
      expect(output).toMatch(/checks_succeeded\.*: 100\.00%/);
    });
  },
);
