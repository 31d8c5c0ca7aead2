// A Redis that does not answer at boot (REDIS_URL on a closed loopback port), in every process, each
// run for real (its entry point through tsx). The operator cannot work without its account store: it
// ends with one line naming the cause and exit 2, no stack trace (lib/common/boot.ts, BootFailure).
// The quota service and the embedded server start anyway, with one line saying so, and answer 503
// until Redis does (the embedded server prints no ready line meanwhile) (a pod started before its Redis waits for it instead of restarting). Detect and
// health open no store: Redis's absence changes nothing for them.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { eventually } from './support/eventually.ts';
import {
  type ServerProcess,
  spawnOperator,
  startClusterService,
  startServer,
} from './support/server-process.ts';

const started: ServerProcess[] = [];
const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-no-redis-'));
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});
const keep = (server: ServerProcess) => {
  started.push(server);
  return server;
};

/** A loopback port nothing listens on: bound by the OS, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const STORE_UNAVAILABLE = { code: 5001, message: 'Quota store unavailable; try again shortly' };

/** The lines that are not the JSON log (what a process says on stderr). */
const plainLines = (server: ServerProcess) =>
  server
    .output()
    .split('\n')
    .filter((l) => l.trim() !== '' && !l.startsWith('{'));

const noRedis = async () => {
  const port = await closedPort();
  return { port, env: { REDIS_URL: `redis://127.0.0.1:${port}/0`, REDIS_CONNECT_TIMEOUT_MS: '500' } };
};

describe('Redis unreachable at boot', () => {
  it('the operator: one line naming it, exit 2', async () => {
    const { port, env } = await noRedis();
    // A kubeconfig that loads (the operator reads it first); its API server is never reached.
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{ name: c, cluster: { server: "https://127.0.0.1:1" } }]',
        'users: [{ name: u, user: { token: t } }]',
        'contexts: [{ name: x, context: { cluster: c, user: u } }]',
        'current-context: x',
      ].join('\n'),
    );
    const operator = keep(
      await spawnOperator({ kubeconfig, redisUrl: env.REDIS_URL, waitFor: 'nothing', env }),
    );
    expect(await operator.exited).toBe(2);
    expect(operator.output().trim()).toBe(
      `nsfwdetector operator: Redis not reachable: Redis not ready after 500 ms (connect ECONNREFUSED 127.0.0.1:${port})`,
    );
  }, 60_000);

  it('the operator: a kubeconfig that cannot be read, one line naming it, exit 2', async () => {
    const { env } = await noRedis();
    const missing = join(dir, 'missing-kubeconfig');
    const operator = keep(
      await spawnOperator({ kubeconfig: missing, redisUrl: env.REDIS_URL, waitFor: 'nothing', env }),
    );
    expect(await operator.exited).toBe(2);
    expect(operator.output().trim()).toBe(
      `nsfwdetector operator: cannot load the kubeconfig: ENOENT: no such file or directory, open '${missing}'`,
    );
  }, 60_000);

  it('the quota service: starts, says so in one line, is not ready until Redis answers', async () => {
    const { port, env } = await noRedis();
    const server = keep(await startClusterService('quota', { env }));
    const ready = await fetch(`${server.url}/internal/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual(STORE_UNAVAILABLE);
    expect(plainLines(server)).toEqual([
      `nsfwdetector quota: Redis not reachable yet; answering 503 until it is (Redis not ready after 500 ms (connect ECONNREFUSED 127.0.0.1:${port}))`,
    ]);
    expect(await server.stop()).toBe(0);
  }, 60_000);

  it('the embedded server: starts, says so in one line, answers a detect request 503 until Redis does', async () => {
    const { port, env } = await noRedis();
    const server = keep(await startServer(env, { waitFor: 'listening' }));
    const res = await fetch(`${server.url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: readFileSync(fixture('320x240.jpg')),
    });
    expect(res.status).toBe(503);
    // The Redis line; then, once the model is loaded, what the ready line waits for (test/readiness-truth.test.ts).
    const lines = () => plainLines(server);
    expect(lines()[0]).toBe(
      `nsfwdetector: Redis not reachable yet; answering 503 until it is (Redis not ready after 500 ms (connect ECONNREFUSED 127.0.0.1:${port}))`,
    );
    await eventually('the waiting line', async () => (lines().length > 1 ? true : undefined), 120_000);
    expect(lines()[1]).toMatch(
      /^nsfwdetector: waiting for the quota store to answer before scoring; not ready meanwhile \(.+\)$/,
    );
    const answer = await fetch(`${server.url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: readFileSync(fixture('320x240.jpg')),
    });
    expect(answer.status).toBe(503);
    expect(await answer.json()).toEqual(STORE_UNAVAILABLE);
    expect(await server.stop()).toBe(0);
  }, 180_000);

  it.each(['detect', 'health'] as const)(
    'the %s service opens no store: it becomes ready',
    async (service) => {
      const { env } = await noRedis();
      const server = keep(await startClusterService(service, { env, waitFor: 'ready' }));
      expect((await fetch(`${server.url}/internal/ready`)).status).toBe(200);
      expect(plainLines(server)).toEqual([]);
      expect(await server.stop()).toBe(0);
    },
    180_000,
  );
});
