import { describe, expect, it } from 'vitest';
import { ApiError } from '../../lib/common/errors.ts';
import {
  DRAINING_HEADER,
  FAIR_WAIT_MS,
  HEAVY_IMAGE_CPU_MS,
  SMALL_BODY_BYTES,
  WorkGate,
  type WorkGateOptions,
} from './work-gate.ts';

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
  it('starts an image only while its decoding estimate fits the budget; a smaller one that fits goes first', async () => {
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
    // Does not wait behind `second`, which waits for memory: 700 + 100 fits.
    const small = run('small', 100, done.small.promise);
    await Promise.resolve();
    expect(started).toEqual(['big', 'small']);
    expect([g.running, g.waiting, g.decodingBytes]).toEqual([2, 1, 800]);
    done.big.resolve();
    await big;
    await second;
    done.small.resolve();
    await small;
    expect(started).toEqual(['big', 'small', 'second']);
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
    expect(refusal).toMatchObject({
      status: 503,
      code: 5001,
      headers: { 'retry-after': '3', [DRAINING_HEADER]: '1' },
    });
    expect(refusal.message).toMatch(/Shutting down/);
  });

  it("marks only a closed gate's refusals for a retry elsewhere, not a busy one's", () => {
    const g = gate({ uploads: 1 });
    expect(g.tryAdmit()).toBeDefined();
    expect(g.tryAdmit()).toBeUndefined();
    expect(g.busy().headers).not.toHaveProperty(DRAINING_HEADER);
  });
});

const MiB = 1024 * 1024;

/** Runs `name` through the gate until its `done` is resolved, recording when it starts. */
function recorder(g: WorkGate) {
  const started: string[] = [];
  const done = new Map<string, () => void>();
  const run = (name: string, memory: number, client?: string) => {
    const finished = deferred();
    done.set(name, finished.resolve);
    return g.score(
      async () => {
        started.push(name);
        await finished.promise;
      },
      memory,
      client,
    );
  };
  const finish = async (name: string, runs: Promise<unknown>) => {
    done.get(name)?.();
    await runs;
    // Let the waiters it released record their start.
    await new Promise((r) => setImmediate(r));
  };
  return { started, run, finish };
}

describe('WorkGate: lanes', () => {
  // 4 slots, 640 MiB: large images (estimate over 32 MiB) leave 1 slot and 96 MiB to small ones
  // while another large one runs.
  const lanes = () => gate({ active: 4, decodeBytes: 640 * MiB });

  it('keeps memory for small images: a second large one waits although the budget would hold it', async () => {
    const g = lanes();
    const { started, run, finish } = recorder(g);
    const a = run('A', 400 * MiB);
    run('B', 150 * MiB); // 550 MiB of large images: over 640 - 96
    run('s1', 30 * MiB);
    run('s2', 30 * MiB);
    await Promise.resolve();
    expect(started).toEqual(['A', 's1', 's2']);
    expect(g.decodingBytes).toBe(460 * MiB);
    await finish('A', a);
    expect(started).toEqual(['A', 's1', 's2', 'B']);
  });

  it('keeps a slot for small images: large ones take at most 3 of 4', async () => {
    const g = lanes();
    const { started, run } = recorder(g);
    for (const name of ['L1', 'L2', 'L3', 'L4']) run(name, 40 * MiB);
    run('s', 10 * MiB);
    await Promise.resolve();
    expect(started).toEqual(['L1', 'L2', 'L3', 's']);
    expect([g.running, g.waiting]).toEqual([4, 1]);
  });

  it('lets a large image alone take the whole budget', async () => {
    const g = lanes();
    const { started, run } = recorder(g);
    run('huge', 630 * MiB);
    run('s', 10 * MiB);
    run('L', 40 * MiB);
    await Promise.resolve();
    expect(started).toEqual(['huge', 's']);
  });
});

describe('WorkGate: no starvation', () => {
  const setup = (clock: { now: number }) =>
    new WorkGate(
      {
        active: 4,
        uploads: 16,
        uploadsPerClient: 16,
        uploadBytes: 1000,
        decodeBytes: 640 * MiB,
        retryAfterSeconds: 1,
      },
      () => clock.now,
    );

  it('lets a smaller large image overtake one that has waited under 2 s', async () => {
    const clock = { now: 0 };
    const g = setup(clock);
    const { started, run } = recorder(g);
    run('L1', 500 * MiB);
    run('L2', 300 * MiB);
    clock.now = 1_000;
    run('L3', 40 * MiB);
    await Promise.resolve();
    expect(started).toEqual(['L1', 'L3']);
  });

  it('stops large images overtaking one that has waited 2 s; small ones still go', async () => {
    const clock = { now: 0 };
    const g = setup(clock);
    const { started, run, finish } = recorder(g);
    const l1 = run('L1', 500 * MiB);
    run('L2', 300 * MiB);
    clock.now = 2_500;
    run('L3', 40 * MiB);
    run('s', 10 * MiB);
    await Promise.resolve();
    expect(started).toEqual(['L1', 's']);
    await finish('L1', l1);
    expect(started).toEqual(['L1', 's', 'L2', 'L3']);
  });
});

describe('WorkGate: per-client share of decoding', () => {
  it('holds one client to half the slots, leaving the rest to others', async () => {
    const g = gate({ active: 4, decodeBytes: 1000 });
    const { started, run, finish } = recorder(g);
    const a1 = run('a1', 100, 'ip:a');
    run('a2', 100, 'ip:a');
    run('a3', 100, 'ip:a');
    run('b1', 100, 'ip:b');
    await Promise.resolve();
    expect(started).toEqual(['a1', 'a2', 'b1']);
    await finish('a1', a1);
    expect(started).toEqual(['a1', 'a2', 'b1', 'a3']);
  });

  it('holds one client to half the budget, except for its first image', async () => {
    const g = gate({ active: 4, decodeBytes: 1000 });
    const { started, run } = recorder(g);
    run('a1', 600, 'ip:a'); // alone: over half the budget, still decoded
    run('a2', 100, 'ip:a');
    run('b1', 300, 'ip:b');
    await Promise.resolve();
    expect(started).toEqual(['a1', 'b1']);
    expect(g.waiting).toBe(1);
  });
});

describe('WorkGate: memory held after the answer', () => {
  it("counts a killed job's memory until its process has exited, then admits the next", async () => {
    const g = gate({ active: 2, decodeBytes: 1000 });
    const exited = deferred();
    const killed = g.score(async (stillHeld) => {
      stillHeld(exited.promise);
      throw new Error('killed at the deadline');
    }, 700);
    await expect(killed).rejects.toThrow('killed');
    expect([g.running, g.decodingBytes, g.heldAfterAnswer]).toEqual([0, 700, 700]);
    let ran = false;
    const next = g.score(async () => {
      ran = true;
    }, 700);
    await new Promise((r) => setImmediate(r));
    expect(ran).toBe(false);
    exited.resolve();
    await next;
    expect(ran).toBe(true);
    expect([g.running, g.decodingBytes, g.heldAfterAnswer]).toEqual([0, 0, 0]);
  });
});

describe('WorkGate: fair queue by predicted cost and client', () => {
  it("offers a light image from another client the next slot, ahead of a client's queued heavy ones", async () => {
    const g = gate({ active: 1 });
    const order: string[] = [];
    const first = deferred();
    const run = (name: string, client: string, costMs: number) =>
      g.score(
        async () => {
          order.push(name);
          if (name === 'heavy-1') await first.promise;
        },
        0,
        client,
        costMs,
      );
    // One client sends three heavy images; another's light image arrives after them.
    const runs = [
      run('heavy-1', 'ip:attacker', 5_000),
      run('heavy-2', 'ip:attacker', 5_000),
      run('heavy-3', 'ip:attacker', 5_000),
      run('light', 'ip:someone', 30),
    ];
    await Promise.resolve();
    expect(order).toEqual(['heavy-1']);
    first.resolve();
    await Promise.all(runs);
    // It waited behind one heavy image (the one running), not three.
    expect(order).toEqual(['heavy-1', 'light', 'heavy-2', 'heavy-3']);
  });

  it('serves a costly image that has waited FAIR_WAIT_MS ahead of newer light ones', async () => {
    let clock = 0;
    const g = new WorkGate(
      {
        active: 1,
        uploads: 8,
        uploadsPerClient: 8,
        uploadBytes: 1000,
        decodeBytes: 1000,
        retryAfterSeconds: 1,
      },
      () => clock,
    );
    const order: string[] = [];
    const first = deferred();
    const runs = [
      g.score(
        async () => {
          order.push('light-0');
          await first.promise;
        },
        0,
        'c0',
        10,
      ),
      g.score(async () => void order.push('heavy'), 0, 'attacker', 5_000),
    ];
    clock = FAIR_WAIT_MS;
    runs.push(g.score(async () => void order.push('light-1'), 0, 'c1', 10));
    first.resolve();
    await Promise.all(runs);
    expect(order).toEqual(['light-0', 'heavy', 'light-1']);
  });

  it('alternates two clients by cost: one costly image is worth many light ones', async () => {
    const g = gate({ active: 1 });
    const order: string[] = [];
    const first = deferred();
    const runs = [
      g.score(
        async () => {
          order.push('a0');
          await first.promise;
        },
        0,
        'a',
        10,
      ),
      g.score(async () => void order.push('a1'), 0, 'a', 400),
      ...[1, 2, 3].map((i) => g.score(async () => void order.push(`b${i}`), 0, 'b', 100)),
    ];
    await Promise.resolve();
    first.resolve();
    await Promise.all(runs);
    // a1 finishes at 410 in virtual time; b's images at 110, 210, 310: all three go first.
    expect(order).toEqual(['a0', 'b1', 'b2', 'b3', 'a1']);
  });

  it('keeps an image predicted over HEAVY_IMAGE_CPU_MS out of the small lane, whatever its memory', async () => {
    const g = gate({ active: 4 });
    const release = deferred();
    const started: string[] = [];
    const heavy = (i: number) =>
      g.score(
        async () => {
          started.push(`heavy-${i}`);
          await release.promise;
        },
        1,
        `c${i}`,
        HEAVY_IMAGE_CPU_MS + 1,
      );
    const runs = [1, 2, 3, 4].map(heavy);
    await Promise.resolve();
    // Four slots: one is kept for light images.
    expect(started).toEqual(['heavy-1', 'heavy-2', 'heavy-3']);
    const light = g.score(async () => void started.push('light'), 1, 'c9', 10);
    await light;
    expect(started).toContain('light');
    release.resolve();
    await Promise.all(runs);
  });
});

describe('WorkGate: upload bytes, with a share for small bodies', () => {
  const uploadBytes = 64 * SMALL_BODY_BYTES;

  it('leaves an eighth of the bound to small bodies: large ones stop short of it, small ones use it', () => {
    const g = gate({ uploads: 100, uploadBytes });
    const large = Array.from({ length: 7 }, () => g.tryAdmit());
    // Seven large bodies of 8 × SMALL_BODY_BYTES take seven eighths.
    for (const a of large) expect(a?.holdBytes(8 * SMALL_BODY_BYTES)).toBe(true);
    // An eighth large one may not start on the small bodies' share, not even by growing into it.
    const eighth = g.tryAdmit();
    expect(eighth?.holdBytes(SMALL_BODY_BYTES)).toBe(true);
    expect(eighth?.holdBytes(1)).toBe(false);
    eighth?.release();
    // Small bodies take the rest.
    const small = Array.from({ length: 8 }, () => g.tryAdmit());
    for (const a of small) expect(a?.holdBytes(SMALL_BODY_BYTES)).toBe(true);
    expect(g.bytes).toBe(uploadBytes);
    expect(g.tryAdmit()?.holdBytes(1)).toBe(false);
  });

  it("returns a body's bytes once it is handed to its decoder (releaseBytes), once", () => {
    const g = gate({ uploads: 100, uploadBytes });
    const a = g.tryAdmit();
    expect(a?.holdBytes(9 * SMALL_BODY_BYTES)).toBe(true);
    expect(g.bytes).toBe(9 * SMALL_BODY_BYTES);
    a?.releaseBytes();
    a?.releaseBytes();
    a?.release();
    expect(g.bytes).toBe(0);
    // The large bodies' count went back too: seven eighths can be taken again.
    const b = g.tryAdmit();
    expect(b?.holdBytes(56 * SMALL_BODY_BYTES)).toBe(true);
  });
});
