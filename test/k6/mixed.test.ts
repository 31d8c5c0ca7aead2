// Smoke run of the mixed-traffic scenario (loadtests/mixed.ts + mixed.js) against the real embedded
// server on a real Redis: every one of the six formats answered 200, with a key and anonymously, and the
// answers printed second by second. The node suites run the same scenario through a cluster's gateway.

import { expect, it } from 'vitest';
import { runMixed } from '../../loadtests/mixed.ts';
import { createAccount, createKey, startStack } from '../../loadtests/run.ts';
import { describeWithTool, K6, REDIS_SERVER } from '../support/tools.ts';

describeWithTool([K6, REDIS_SERVER], 'k6 mixed traffic scenario', () => {
  it('sends all six formats, with a key and anonymously, and counts the answers per second', {
    timeout: 240_000,
  }, async () => {
    const stack = await startStack({ ANON_PER_MINUTE: '1000', ANON_PER_DAY: '1000' });
    try {
      await createAccount(stack.env, 'mixed@example.com', 'pro');
      const { secret } = await createKey(stack.env, 'mixed@example.com', 'mixed');
      const lines: string[] = [];
      const result = await runMixed({
        baseUrl: stack.server.url,
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
      await stack.close();
    }
  });
});
