// Readiness that tells the truth, in the real `npm start` process (its entry point through tsx) on a
// real redis-server: the ready line and /internal/ready wait for what detect needs (the model, warm
// workers, and with REDIS_URL the quota store) and /internal/ready drops while the store is down and
// comes back with it. A port another process holds is one line and exit 2, as every start-up error.

import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { eventually } from './support/eventually.ts';
import { RedisServer } from './support/redis-server.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';

const STORE_UNAVAILABLE = { code: 5001, message: 'Quota store unavailable; try again shortly' };
const READY_LINE = /^ready — http:\S+ is scoring images \(model mobilenet_v2 loaded, workers warm\)$/m;
const WAITING_LINE =
  /^nsfwdetector: waiting for the quota store to answer before scoring; not ready meanwhile \(/m;

const started: ServerProcess[] = [];
const redises: RedisServer[] = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
  await Promise.all(redises.map((r) => r.stop()));
});

async function ready(server: ServerProcess) {
  const res = await fetch(`${server.url}/internal/ready`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function detect(server: ServerProcess) {
  return fetch(`${server.url}/api/public/detect`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg' },
    body: readFileSync(fixture('320x240.jpg')),
  });
}

describeWithTool(REDIS_SERVER, 'readiness with REDIS_URL (a real redis-server)', () => {
  it('drops while the store is down (detect answers 503 then) and comes back with it', async () => {
    const redis = await RedisServer.start();
    redises.push(redis);
    const server = await startServer({ REDIS_URL: redis.url, REDIS_CONNECT_TIMEOUT_MS: '500' });
    started.push(server);
    expect(await ready(server)).toMatchObject({ status: 200, body: { data: { status: 'ready' } } });
    expect(server.output()).toMatch(READY_LINE);
    expect((await detect(server)).status).toBe(200);

    await redis.kill();
    const down = await eventually('readiness to drop', async () => {
      const answer = await ready(server);
      return answer.status === 503 ? answer : undefined;
    });
    expect(down.body).toEqual(STORE_UNAVAILABLE);
    const refused = await detect(server);
    expect(refused.status).toBe(503);
    expect(await refused.json()).toEqual(STORE_UNAVAILABLE);

    await redis.restart();
    await eventually('readiness to come back', async () =>
      (await ready(server)).status === 200 ? true : undefined,
    );
    expect((await detect(server)).status).toBe(200);
    expect(await server.stop()).toBe(0);
  }, 180_000);

  it('a store down at boot: no ready line and not ready until it answers, then both', async () => {
    const redis = await RedisServer.start();
    redises.push(redis);
    await redis.kill();
    const server = await startServer(
      { REDIS_URL: redis.url, REDIS_CONNECT_TIMEOUT_MS: '500' },
      { waitFor: 'listening' },
    );
    started.push(server);
    // The model loads and the workers warm first; then the process says what it waits for.
    await eventually(
      'the waiting line',
      async () => (WAITING_LINE.test(server.output()) ? true : undefined),
      120_000,
    );
    expect(server.output()).not.toMatch(READY_LINE);
    expect(await ready(server)).toEqual({ status: 503, body: STORE_UNAVAILABLE });

    await redis.restart();
    await eventually('the ready line', async () => (READY_LINE.test(server.output()) ? true : undefined));
    expect((await ready(server)).status).toBe(200);
    expect((await detect(server)).status).toBe(200);
    expect(await server.stop()).toBe(0);
  }, 180_000);
});

describe('a port in use', () => {
  it('is one line naming it and exit 2, no stack trace', async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const { port } = holder.address() as { port: number };
    try {
      const server = await startServer({ PORT: String(port) }, { waitFor: 'nothing' });
      started.push(server);
      expect(await server.exited).toBe(2);
      expect(server.output().trim()).toBe(
        `nsfwdetector: port ${port} on 127.0.0.1 is already in use (another nsfwdetector, or another program): stop it, or choose another port (0 picks a free one)`,
      );
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  }, 60_000);
});
