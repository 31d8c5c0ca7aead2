import { describe, expect, it } from 'vitest';
import { HeaderError, type Walk, WalkScheduler } from './probe-bytes.ts';

/** A scheduler on a clock of its own, whose turns of the event loop the test runs one by one. */
function harness() {
  const clock = { ms: 0 };
  const turns: Array<() => void> = [];
  const scheduler = new WalkScheduler(
    5,
    () => clock.ms,
    (callback) => turns.push(callback),
  );
  const steps: string[] = [];
  /** `n` steps of 1 ms each, then its name (or a HeaderError after `failAt` steps). */
  function* walk(name: string, n: number, failAt = Number.POSITIVE_INFINITY): Walk<string> {
    for (let i = 0; i < n; i++) {
      if (i === failAt) throw new HeaderError(`${name} failed`);
      clock.ms += 1;
      steps.push(name);
      yield;
    }
    return name;
  }
  /** The steps each turn ran: the turn the walks were started in, then every turn until none is left. */
  const runTurns = () => {
    const perTurn = [steps.splice(0)];
    for (let turn = turns.shift(); turn; turn = turns.shift()) {
      turn();
      perTurn.push(steps.splice(0));
    }
    return perTurn.filter((turn) => turn.length > 0);
  };
  return { scheduler, walk, runTurns };
}

describe('WalkScheduler: one slice a turn, shared by every walk', () => {
  it('runs four concurrent walks one slice a turn in all, in rotation, not a slice each', async () => {
    const { scheduler, walk, runTurns } = harness();
    const done = ['a', 'b', 'c', 'd'].map((name) => scheduler.run(walk(name, 12)));
    const perTurn = runTurns();
    expect(await Promise.all(done)).toEqual(['a', 'b', 'c', 'd']);
    // 48 steps of 1 ms in slices of 5 ms: never more than one slice's steps in a turn.
    expect(perTurn.flat()).toHaveLength(48);
    for (const turn of perTurn) expect(turn.length).toBeLessThanOrEqual(5);
    // The first four turns go to the four walks in turn (before, every walk took a slice every turn).
    expect(perTurn.slice(0, 4).map((turn) => turn.join(''))).toEqual(['aaaaa', 'bbbbb', 'ccccc', 'ddddd']);
  });

  it('starts a short walk at once, and a walk that fails rejects without holding up the others', async () => {
    const { scheduler, walk, runTurns } = harness();
    const short = scheduler.run(walk('s', 2));
    const failing = scheduler.run(walk('f', 10, 3));
    const after = scheduler.run(walk('n', 4));
    const perTurn = runTurns();
    await expect(short).resolves.toBe('s');
    await expect(failing).rejects.toThrow('f failed');
    await expect(after).resolves.toBe('n');
    // The short walk and the first steps of the next shared the first slice.
    expect(perTurn[0]?.join('')).toBe('ssfff');
  });
});
