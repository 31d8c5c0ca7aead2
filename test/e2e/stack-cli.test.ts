// `npm run stack` itself, as a user runs it: it prints the edge URL, the edge answers a detect call
// exactly as `npm start` does, and Ctrl-C (SIGINT to the terminal's process group) leaves no process
// and no temp directory behind.

import { existsSync } from 'node:fs';
import { afterAll, expect, it } from 'vitest';
import { spawnChild } from '../support/children.ts';
import { ROOT, type ServerProcess, startServer } from '../support/server-process.ts';
import { JPEG, post } from '../support/stack-client.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describeWithStackTools('npm run stack', ['helm', 'envoy', 'jaeger'], { redis: true }, () => {
  let embedded: ServerProcess | undefined;
  afterAll(async () => {
    await embedded?.stop();
  });

  it('comes up, answers as npm start does, and stops every child on Ctrl-C', {
    timeout: 300_000,
  }, async () => {
    // Its own process group, as a terminal's foreground job is (spawnChild: the run's guards see it
    // and everything it starts).
    const stack = spawnChild('npm run stack', 'npm', ['run', '--silent', 'stack'], {
      cwd: ROOT,
      env: {
        ...process.env,
        STACK_PORT: '0',
        ANON_PER_MINUTE: '1000',
        ANON_PER_DAY: '1000',
        LOG_LEVEL: 'warn',
      },
    });
    const { proc, exited } = stack;
    try {
      const deadline = Date.now() + 240_000;
      while (!/Ctrl-C stops everything/.test(stack.output())) {
        const output = stack.output();
        if (proc.exitCode !== null) throw new Error(`npm run stack exited:\n${output}`);
        if (Date.now() > deadline) throw new Error(`npm run stack not up:\n${output}`);
        await new Promise((r) => setTimeout(r, 200));
      }
      const output = stack.output();
      const edge = /edge:\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1] as string;
      const pids = (/pids:\s+([\d ]+)/.exec(output)?.[1] ?? '').trim().split(' ').map(Number);
      const dir = /temp dir:\s+(\S+)/.exec(output)?.[1] as string;
      expect(edge).toBeDefined();
      expect(pids.length).toBe(6);
      expect(existsSync(dir)).toBe(true);

      embedded = await startServer({ ANON_PER_MINUTE: '1000', ANON_PER_DAY: '1000', LOG_LEVEL: 'warn' });
      const [viaEdge, direct] = [
        await post(edge, '/api/public/detect'),
        await post(embedded.url, '/api/public/detect'),
      ];
      const comparable = (a: typeof viaEdge) => ({
        status: a.status,
        contentType: a.contentType,
        tier: a.headers.get('x-quota-tier'),
        limit: a.headers.get('x-ratelimit-limit'),
        body: { ...a.body, data: { ...a.body.data, timing_ms: 0 } },
      });
      expect(viaEdge.status, JSON.stringify(viaEdge.body)).toBe(200);
      expect(comparable(viaEdge)).toEqual(comparable(direct));
      expect(viaEdge.body.data.image.bytes).toBe(JPEG.length);

      process.kill(-(proc.pid as number), 'SIGINT');
      await exited;
      // npm reports a script stopped by Ctrl-C by dying of SIGINT itself; the supervisor exited 0.
      expect(
        proc.exitCode === 0 || proc.signalCode === 'SIGINT',
        `exit ${proc.exitCode}/${proc.signalCode}`,
      ).toBe(true);
      expect(stack.output()).toContain('[stack] SIGINT: stopping every child');
      const deadlineGone = Date.now() + 5_000;
      while (pids.some(alive) && Date.now() < deadlineGone) await new Promise((r) => setTimeout(r, 100));
      expect(pids.filter(alive)).toEqual([]);
      expect(existsSync(dir)).toBe(false);
    } finally {
      // On a failure above: stop it as a user would (its children are in groups of their own).
      if (proc.exitCode === null && proc.signalCode === null) {
        process.kill(-(proc.pid as number), 'SIGINT');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
        await stack.kill();
      }
    }
  });
});
