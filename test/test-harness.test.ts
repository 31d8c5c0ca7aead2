// The test harness itself (test/support): processes started by tests never outlive a failed start,
// the run fails when a test leaves a process or a temp dir behind, and a suite whose tool is missing
// is skipped with its install command outside CI, and fails under CI=true.

import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isRunning, spawnChild } from './support/children.ts';
import { eventually } from './support/eventually.ts';
import { RedisServer } from './support/redis-server.ts';
import { ROOT, StartFailed, spawnService } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';

const RUNNER_FIXTURES = 'test/fixtures/runner';
const NEVER_LISTENS = `${RUNNER_FIXTURES}/never-listens.ts`;
const VITEST = join(ROOT, 'node_modules/vitest/vitest.mjs');

/** A listener on a port of the OS's choosing, to make a port taken. */
async function holdPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as { port: number }).port, server };
}

async function startFailure(start: Promise<unknown>): Promise<StartFailed> {
  const err = await start.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StartFailed);
  return err as StartFailed;
}

describe('a process whose start fails', () => {
  const held: Server[] = [];
  afterAll(() => {
    for (const s of held) s.close();
  });

  it('is gone, with its process group, when the quota server cannot bind its port', async () => {
    const { port, server } = await holdPort();
    held.push(server);
    const err = await startFailure(
      spawnService({
        entry: 'services/quota/server.ts',
        portVar: 'QUOTA_PORT',
        env: { QUOTA_PORT: String(port), LOG_LEVEL: 'warn' },
        startTimeoutMs: 60_000,
      }),
    );
    expect(err.output).toMatch(/port \d+ on 127\.0\.0\.1 is already in use/);
    expect(isRunning(err.pid)).toBe(false);
  });

  it('is stopped, with everything it started, when it never reports its port', async () => {
    const err = await startFailure(
      spawnService({ entry: NEVER_LISTENS, portVar: 'PORT', startTimeoutMs: 5_000 }),
    );
    expect(err.message).toMatch(/reported no port after 5000 ms/);
    const helper = Number(/helper pid (\d+)/.exec(err.output)?.[1]);
    expect(helper).toBeGreaterThan(0);
    expect(isRunning(err.pid)).toBe(false);
    expect(isRunning(helper)).toBe(false);
  });
});

describeWithTool(REDIS_SERVER, 'redis-server on a port found taken', () => {
  it('starts on a fresh port instead, leaving no process on the taken one', async () => {
    const { port, server } = await holdPort();
    try {
      const redis = await RedisServer.start({ firstPort: port });
      try {
        expect(redis.port).not.toBe(port);
        expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);
      } finally {
        await redis.stop();
      }
      expect(isRunning(redis.pid as number)).toBe(false);
    } finally {
      server.close();
    }
  });
});

interface Run {
  code: number | null;
  output: string;
}

/** A whole vitest run (start-up, transform, its guards) inside a test: on a machine busy with the rest
 * of the suite (model sessions on both cores) it can take longer than a unit test's 60 s. */
const FIXTURE_RUN = { timeout: 300_000 };

/** Runs vitest with the repository's harness on fixture suites (test/fixtures/runner). */
async function runFixtures(filter: string, env: Record<string, string | undefined>): Promise<Run> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', ...env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  const child = spawnChild(
    `vitest ${filter}`,
    process.execPath,
    [VITEST, 'run', '--config', `${RUNNER_FIXTURES}/vitest.config.ts`, filter],
    { cwd: ROOT, env: childEnv },
  );
  const code = await child.exited;
  return { code, output: child.output() };
}

describe('the run guard', FIXTURE_RUN, () => {
  it('fails a file that leaves a child running or a temp dir behind, and kills the child', async () => {
    const run = await runFixtures('leaks-in-file', {});
    expect(run.code).toBe(1);
    expect(run.output).toMatch(
      /children still running after the file's hooks \(now killed\): forgotten sleep/,
    );
    expect(run.output).toMatch(/temp dirs left behind: nsfwdetector-forgotten-/);
    const pid = Number(/forgotten pid (\d+)/.exec(run.output)?.[1]);
    expect(pid).toBeGreaterThan(0);
    expect(isRunning(pid)).toBe(false);
  });

  it('fails the run when a process escaped its group and outlived its file, and kills it', async () => {
    const run = await runFixtures('leaks-past-file', {});
    expect(run.code).toBe(1);
    expect(run.output).toMatch(
      /the run left things behind:\n1 process\(es\) started by the tests were still running/,
    );
    const pid = Number(/escaped pid (\d+)/.exec(run.output)?.[1]);
    expect(pid).toBeGreaterThan(0);
    // SIGKILL was sent as the run ended; on a busy host the process takes a moment to be gone.
    await eventually('the escaped process gone', async () => (isRunning(pid) ? undefined : true), 10_000);
  });
});

describe('describeWithTool and skipWithoutTool', FIXTURE_RUN, () => {
  const file = '(test/fixtures/runner/needs-tool.fixture.ts)';
  const needs = 'needs nsfwdetector-fake-tool; install: echo install-the-fake-tool';

  it('outside CI, skip a suite or a test whose tool is missing, with its install command and a count before the summary', async () => {
    const run = await runFixtures('needs-tool', { CI: undefined });
    expect(run.code).toBe(0);
    expect(run.output).toContain(` ↓ skipped: suite that needs the fake tool ${file}: ${needs}`);
    expect(run.output).toContain(` ↓ skipped: test that needs the fake tool ${file}: ${needs}`);
    const countLine = / 2 suites skipped: .*the fake tool .*the fake tool/;
    expect(run.output).toMatch(countLine);
    // Just before vitest's own summary.
    expect(run.output.search(countLine)).toBeLessThan(run.output.indexOf(' Test Files '));
    expect(run.output).toMatch(/Tests +2 skipped/);
  });

  it('with CI=true, fail that suite and that test instead', async () => {
    const run = await runFixtures('needs-tool', { CI: 'true' });
    expect(run.code).toBe(1);
    const missing = 'nsfwdetector-fake-tool is not installed (install: echo install-the-fake-tool).';
    expect(run.output).toContain(`${missing} CI=true requires this suite.`);
    expect(run.output).toContain(`${missing} CI=true requires this test.`);
    expect(run.output).toMatch(/Tests +2 failed/);
    expect(run.output).not.toContain('skipped:');
  });

  it('run the suite and the test when the tool is on PATH', async () => {
    const bin = join(ROOT, RUNNER_FIXTURES, 'bin');
    const run = await runFixtures('needs-tool', { CI: 'true', PATH: `${bin}:${process.env.PATH}` });
    expect(run.code, run.output).toBe(0);
    expect(run.output).toMatch(/Tests +2 passed/);
  });
});
