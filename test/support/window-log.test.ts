// The fixed-window oracle of the process-level quota tests, on a set clock: exact inside a minute,
// both outcomes allowed only for a call near an edge, and a run across an edge repeated once.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DAY_MS, inOneMinute, minuteOf, WindowLog } from './window-log.ts';

// 2031-03-14T10:00:00Z
const T0 = 1_931_248_800_000;

describe('WindowLog', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(T0 + 10_000);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A call that takes `ms` on the clock and is answered `outcome`. */
  const call = (log: WindowLog, outcome: 'served' | 'refused', ms = 10) =>
    log.call(
      async () => {
        vi.setSystemTime(Date.now() + ms);
        return outcome;
      },
      (o) => o,
    );

  it('names the UTC minute of an instant', () => {
    expect(minuteOf(T0)).toBe(32_187_480);
    expect(minuteOf(T0 + 59_999)).toBe(32_187_480);
    expect(minuteOf(T0 + 60_000)).toBe(32_187_481);
  });

  it('inside one minute, allows exactly the first `limit` calls', async () => {
    const log = new WindowLog();
    await call(log, 'served');
    expect(log.allowed(2)).toEqual(['served']);
    await call(log, 'served');
    expect(log.allowed(2)).toEqual(['served']);
    await call(log, 'served');
    expect(log.allowed(2)).toEqual(['refused']);
    expect(log.servedIn(minuteOf(T0))).toEqual([3, 3]);
  });

  it('starts a new count in the next minute', async () => {
    const log = new WindowLog();
    await call(log, 'served');
    await call(log, 'served');
    vi.setSystemTime(T0 + 60_000);
    await call(log, 'served');
    expect(log.allowed(2)).toEqual(['served']);
    expect(log.servedIn(minuteOf(T0))).toEqual([2, 2]);
    expect(log.servedIn(minuteOf(T0) + 1)).toEqual([1, 1]);
  });

  it('allows either outcome only for what straddled an edge', async () => {
    const log = new WindowLog();
    await call(log, 'served');
    vi.setSystemTime(T0 + 59_995);
    await call(log, 'served'); // 59 995 → 60 005: in either minute
    expect(log.allowed(2)).toEqual(['served']);
    await call(log, 'refused');
    // Under a limit of 1 it depends on the minute the straddling call was counted in: either answer.
    expect(log.allowed(1).sort()).toEqual(['refused', 'served']);
    // With a limit of 2 nothing in the new minute can have reached it.
    expect(log.allowed(2)).toEqual(['served']);
    expect(log.servedIn(minuteOf(T0))).toEqual([1, 2]);
    expect(log.servedIn(minuteOf(T0) + 1)).toEqual([0, 1]);
  });
});

describe('WindowLog.untilRefused', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(T0 + 10_000);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A server answering `answers` in turn, each taking 10 ms. */
  const server = (answers: number[]) => {
    let i = 0;
    return async () => {
      vi.setSystemTime(Date.now() + 10);
      return answers[i++] ?? 200;
    };
  };

  it('returns the refusal that follows the limit', async () => {
    const log = new WindowLog();
    expect(await log.untilRefused(server([200, 200, 429]), (s) => s === 200, 2, 5)).toBe(429);
    expect(log.count('served')).toBe(2);
  });

  it('fails on a server that serves past the limit, or never refuses', async () => {
    await expect(
      new WindowLog().untilRefused(server([200, 200, 200, 429]), (s) => s === 200, 2, 5),
    ).rejects.toThrow(/call 3/);
    await expect(new WindowLog().untilRefused(server([200]), (s) => s === 200, 9, 3)).rejects.toThrow(
      /no refusal in 3 calls/,
    );
  });
});

describe('WindowLog over UTC days', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('starts a new count at midnight, and allows either answer across it', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.UTC(2031, 2, 14, 23, 59, 59, 900));
    const log = new WindowLog(DAY_MS);
    const call = (outcome: 'served' | 'refused', ms: number) =>
      log.call(
        async () => {
          vi.setSystemTime(Date.now() + ms);
          return outcome;
        },
        (o) => o,
      );
    await call('served', 10);
    expect(log.allowed(1)).toEqual(['served']);
    await call('refused', 10);
    expect(log.allowed(1)).toEqual(['refused']);
    await call('served', 200); // 23:59:59.920 → 00:00:00.120
    expect(log.allowed(1).sort()).toEqual(['refused', 'served']);
    // Refused just after midnight: right if the straddling call was counted today, else not.
    await call('refused', 10);
    expect(log.allowed(1).sort()).toEqual(['refused', 'served']);
    expect(log.servedIn(log.windowOf(Date.UTC(2031, 2, 15)))).toEqual([0, 1]);
  });
});

describe('inOneMinute', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('runs a burst once when it stays in one minute', async () => {
    vi.setSystemTime(T0 + 10_000);
    let runs = 0;
    expect(await inOneMinute(async () => ++runs)).toBe(1);
  });

  it('runs a burst again when it crossed an edge, and fails when the second one does too', async () => {
    vi.setSystemTime(T0 + 59_000);
    let runs = 0;
    const crossing = async () => {
      vi.setSystemTime(Date.now() + 2_000);
      return ++runs;
    };
    expect(await inOneMinute(crossing)).toBe(2);
    vi.setSystemTime(T0 + 119_000);
    await expect(
      inOneMinute(async () => {
        vi.setSystemTime(Date.now() + 60_000);
      }),
    ).rejects.toThrow(/two runs in a row crossed a minute edge/);
  });
});
