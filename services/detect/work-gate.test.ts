import { describe, expect, it } from 'vitest';
import { ApiError } from '../common/errors.ts';
import { WorkGate, type WorkGateOptions } from './work-gate.ts';

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function gate(opts: Partial<WorkGateOptions> = {}) {
  return new WorkGate({
    active: 1,
    uploads: 4,
    uploadsPerClient: 4,
    uploadBytes: 1000,
    decodeBytes: 1000,
    retryAfterSeconds: 1,
    ...opts,
  });
}

describe('WorkGate: scoring slots', () => {
  it('scores at most `active` at once, in arrival order, and never refuses a waiter', async () => {
    const g = gate({ active: 1 });
    const order: number[] = [];
    const first = deferred();
    const runs = [0, 1, 2].map((i) =>
      g.score(async () => {
        order.push(i);
        if (i === 0) await first.promise;
      }),
    );
    await Promise.resolve();
    expect(g.running).toBe(1);
    expect(g.waiting).toBe(2);
    expect(order).toEqual([0]);
    first.resolve();
    await Promise.all(runs);
    expect(order).toEqual([0, 1, 2]);
    expect(g.running).toBe(0);
  });

  it('frees the slot when work fails', async () => {
    const g = gate();
    await expect(g.score(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(g.running).toBe(0);
  });

  it('holds no scoring slot for an admitted request that has not asked to score', () => {
    const g = gate({ active: 1, uploads: 3 });
    g.tryAdmit();
    g.tryAdmit();
    expect(g.running).toBe(0);
  });
});

describe('WorkGate: decode memory', () => {
  it('starts an image only while its decoding estimate fits the budget, in arrival order', async () => {
    const g = gate({ active: 4, decodeBytes: 1000 });
    const started: string[] = [];
    const done = { big: deferred(), small: deferred() };
    const run = (name: string, memory: number, until: Promise<void> = Promise.resolve()) =>
      g.score(async () => {
        started.push(name);
        await until;
      }, memory);
    const big = run('big', 700, done.big.promise);
    const second = run('second', 400);
    // Would fit beside `big`, but does not overtake `second`, which waits for memory.
    const small = run('small', 100, done.small.promise);
    await Promise.resolve();
    expect(started).toEqual(['big']);
    expect([g.running, g.waiting, g.decodingBytes]).toEqual([1, 2, 700]);
    done.big.resolve();
    await big;
    await second;
    done.small.resolve();
    await small;
    expect(started).toEqual(['big', 'second', 'small']);
    expect([g.running, g.waiting, g.decodingBytes]).toEqual([0, 0, 0]);
  });

  it('refuses at once, with 4004, an image whose estimate alone is over the budget', async () => {
    const g = gate({ decodeBytes: 1000 });
    let ran = false;
    const err = await g
      .score(async () => {
        ran = true;
      }, 1001)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 400, code: 4004 });
    expect(ran).toBe(false);
    expect([g.running, g.decodingBytes]).toEqual([0, 0]);
  });

  it('returns the memory of work that fails', async () => {
    const g = gate({ decodeBytes: 1000 });
    await expect(g.score(async () => Promise.reject(new Error('boom')), 600)).rejects.toThrow('boom');
    expect(g.decodingBytes).toBe(0);
    await g.score(async () => {}, 1000);
  });
});

describe('WorkGate: admissions', () => {
  it('admits up to the total, then none, and again after a release; release is idempotent', () => {
    const g = gate({ uploads: 2 });
    const a = g.tryAdmit();
    expect(g.tryAdmit()).toBeDefined();
    expect(g.tryAdmit()).toBeUndefined();
    a?.release();
    a?.release(); // a double release must not open an extra slot
    expect(g.tryAdmit()).toBeDefined();
    expect(g.tryAdmit()).toBeUndefined();
    expect(g.admitted).toBe(2);
  });

  it('bounds each client, at admission or claimed later, leaving room for others', () => {
    const g = gate({ uploads: 10, uploadsPerClient: 2 });
    const a1 = g.tryAdmit('ip:a');
    expect(g.tryAdmit('ip:a')).toBeDefined();
    expect(g.tryAdmit('ip:a')).toBeUndefined();
    expect(g.tryAdmit('ip:b')).toBeDefined();
    // The key endpoint: admitted first, its account claimed once known.
    const k1 = g.tryAdmit();
    const k2 = g.tryAdmit();
    const k3 = g.tryAdmit();
    expect(k1?.claim('acct:x')).toBe(true);
    expect(k2?.claim('acct:x')).toBe(true);
    expect(k3?.claim('acct:x')).toBe(false);
    a1?.release();
    expect(g.tryAdmit('ip:a')).toBeDefined();
    k1?.release();
    expect(k3?.claim('acct:x')).toBe(true);
  });

  it('bounds the bytes held together, and returns them on release', () => {
    const g = gate({ uploadBytes: 1000 });
    const a = g.tryAdmit();
    const b = g.tryAdmit();
    expect(a?.holdBytes(600)).toBe(true);
    expect(b?.holdBytes(500)).toBe(false);
    expect(b?.holdBytes(400)).toBe(true);
    expect(g.bytes).toBe(1000);
    a?.release();
    expect(g.bytes).toBe(400);
    expect(b?.holdBytes(600)).toBe(true);
  });

  it('refuses everything once closed, with 5001 and Retry-After', () => {
    const g = gate({ retryAfterSeconds: 3 });
    g.close();
    expect(g.tryAdmit()).toBeUndefined();
    const refusal = g.busy();
    expect(refusal).toBeInstanceOf(ApiError);
    expect(refusal).toMatchObject({ status: 503, code: 5001, headers: { 'retry-after': '3' } });
    expect(refusal.message).toMatch(/Shutting down/);
  });
});
