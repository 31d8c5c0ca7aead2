import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { closeConnectionsWhenDraining, drainFirst } from './drain.ts';

function app() {
  const a = Fastify();
  closeConnectionsWhenDraining(a);
  a.get('/internal/ready', async () => ({ code: 0, data: { status: 'ready' } }));
  a.get('/work', async () => ({ code: 0 }));
  return a;
}

describe('draining', () => {
  it('serves as usual until drained', async () => {
    const a = app();
    const ready = await a.inject({ url: '/internal/ready' });
    expect(ready.statusCode).toBe(200);
    expect(ready.headers.connection).not.toBe('close');
  });

  it('drainFirst: still serving, not ready, every answer closes its connection, for the given time', async () => {
    const a = app();
    await drainFirst(a, 0);
    const ready = await a.inject({ url: '/internal/ready' });
    expect({ status: ready.statusCode, code: ready.json().code }).toEqual({ status: 503, code: 5001 });
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
