import { describe, expect, it } from 'vitest';
import { ApiError } from '../common/errors.ts';
import { WorkGate } from './work-gate.ts';

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('WorkGate', () => {
  it('runs at most `active` at once, in arrival order', async () => {
    const gate = new WorkGate({ active: 1, queued: 2, retryAfterSeconds: 1 });
    const order: number[] = [];
    const first = deferred();
    const tickets = [gate.admit(), gate.admit(), gate.admit()];
    const runs = tickets.map((t, i) =>
      t.run(async () => {
        order.push(i);
        if (i === 0) await first.promise;
      }),
    );
    await Promise.resolve();
    expect(gate.running).toBe(1);
    expect(order).toEqual([0]);
    first.resolve();
    await Promise.all(runs);
    expect(order).toEqual([0, 1, 2]);
    expect(gate.running).toBe(0);
  });

  it('refuses past active + queued with 5001 and Retry-After, and admits again after release', () => {
    const gate = new WorkGate({ active: 1, queued: 1, retryAfterSeconds: 3 });
    const a = gate.admit();
    gate.admit();
    let refusal: unknown;
    try {
      gate.admit();
    } catch (err) {
      refusal = err;
    }
    expect(refusal).toBeInstanceOf(ApiError);
    expect(refusal).toMatchObject({ status: 503, code: 5001, headers: { 'retry-after': '3' } });
    a.release();
    a.release(); // idempotent: a double release must not open an extra slot
    gate.admit();
    expect(() => gate.admit()).toThrow(ApiError);
  });

  it('frees the slot when work fails', async () => {
    const gate = new WorkGate({ active: 1, queued: 0, retryAfterSeconds: 1 });
    const t = gate.admit();
    await expect(t.run(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(gate.running).toBe(0);
  });

  it('refuses everything once closed', () => {
    const gate = new WorkGate({ active: 4, queued: 4, retryAfterSeconds: 1 });
    gate.close();
    expect(() => gate.admit()).toThrow(/Shutting down/);
  });
});
