// Smoke run of the mixed-traffic scenario (loadtests/mixed.ts + mixed.js) against the real embedded
// server on a real Redis: every one of the six formats answered 200, with a key and anonymously, and the
// answers printed second by second. The node suites run the same scenario through a cluster's gateway.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { runMixed } from '../../loadtests/mixed.ts';
import { admin } from '../../loadtests/run.ts';
import { RedisServer } from '../support/redis-server.ts';
import { startServer } from '../support/server-process.ts';
import { describeWithTool, K6, REDIS_SERVER } from '../support/tools.ts';

describeWithTool([K6, REDIS_SERVER], 'k6 mixed traffic scenario', () => {
  it('sends all six formats, with a key and anonymously, and counts the answers per second', {
    timeout: 240_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-mixed-test-'));
    const redis = await RedisServer.start();
    const env = {
      REDIS_URL: redis.url,
      ACCOUNTS_FILE: join(dir, 'accounts.json'),
      LOG_LEVEL: 'warn',
      REDIS_COMMAND_TIMEOUT_MS: '1000',
      ANON_PER_MINUTE: '1000',
      ANON_PER_DAY: '1000',
    };
    const server = await startServer(env);
    try {
      await admin(env, ['create-account', '--email', 'mixed@example.com', '--tier', 'pro']);
      const { secret } = (await admin(env, ['issue-key', 'mixed@example.com', '--name', 'mixed'])) as {
        secret: string;
      };
      const lines: string[] = [];
      const result = await runMixed({
        baseUrl: server.url,
        keys: [secret],
        rate: 4,
        duration: '6s',
        onSecond: (line) => lines.push(line),
      });
      if (result.exitCode !== 0) console.error(result.output);
      console.log(lines.join('\n'));
      expect(result.exitCode).toBe(0);
      expect(Object.keys(result.byFormat).sort()).toEqual(['bmp', 'gif', 'jpeg', 'png', 'tiff', 'webp']);
      for (const [format, counts] of Object.entries(result.byFormat))
        expect(counts, format).toEqual({ 200: expect.any(Number) });
      expect(Object.keys(result.byAuth).sort()).toEqual(['anonymous', 'key']);
      expect(result.totals['200']).toBe(result.sent);
      // One line per second of answers, each with its counts.
      expect(lines.length).toBe(result.seconds.length);
      expect(lines.every((l) => /^\s+\d+s {2}200:\d+/.test(l))).toBe(true);
    } finally {
      await server.stop();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
