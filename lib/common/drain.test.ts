import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { closeConnectionsWhenDraining, drainFirst } from './drain.ts';
import { registerProbes } from './probes.ts';

function app() {
  const a = Fastify();
  closeConnectionsWhenDraining(a);
  // In a plugin, as the services register their probes: the drain state is the server's.
  void a.register(async (inner) => registerProbes(inner));
  a.get('/work', async () => ({ code: 0 }));
  return a;
}

describe('draining', () => {
  it('serves as usual until drained', async () => {
    const a = app();
    const ready = await a.inject({ url: '/internal/ready' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ code: 0, message: 'ok', data: { status: 'ready' } });
    expect(ready.headers.connection).not.toBe('close');
  });

  it('drainFirst: still serving, not ready, every answer closes its connection, for the given time', async () => {
    const a = app();
    await a.ready();
    await drainFirst(a, 0);
    const ready = await a.inject({ url: '/internal/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toEqual({ code: 5001, message: 'Draining: shutting down' });
    expect((await a.inject({ url: '/internal/live' })).statusCode).toBe(200);
    const work = await a.inject({ url: '/work' });
    expect(work.statusCode).toBe(200);
    expect(work.headers.connection).toBe('close');
    let done = false;
    const drained = drainFirst(app(), 50).then(() => {
      done = true;
    });
    expect(done).toBe(false);
    await drained;
    expect(done).toBe(true);
  });
});
