// Tests of separate server processes run on this machine's clock (the process's Date.now, Redis
// TIME), which a test cannot set. They need not wait for it either: the test reads the same clock
// around each call, so it knows the window (UTC minute or day) in which the server counted that call
// (exactly, unless the call straddled the window's edge), and its assertions hold whichever window a
// call falls in.

import { expect } from 'vitest';

export const MINUTE_MS = 60_000;
export const DAY_MS = 86_400_000;

/** The UTC minute (minutes since the epoch) that contains `ms`. */
export const minuteOf = (ms: number): number => Math.floor(ms / MINUTE_MS);

export type Counted = 'served' | 'refused';

interface Call {
  from: number;
  to: number;
  outcome: Counted;
}

/**
 * One subject's calls, made one at a time, checked against the fixed-window rule: in each window (a UTC
 * minute by default, or a UTC day) the first `limit` calls are served and the rest refused. The rule is
 * written here by hand, from the spec, and never asks the code under test.
 */
export class WindowLog {
  readonly #calls: Call[] = [];
  readonly #windowMs: number;

  constructor(windowMs: number = MINUTE_MS) {
    this.#windowMs = windowMs;
  }

  /** The window (windows since the epoch) that contains `ms`. */
  windowOf(ms: number): number {
    return Math.floor(ms / this.#windowMs);
  }

  /** Makes one call; `outcome` says whether its answer served or refused it. */
  async call<T>(send: () => Promise<T>, outcome: (answer: T) => Counted): Promise<T> {
    const from = Date.now();
    const answer = await send();
    this.#calls.push({ from, to: Date.now(), outcome: outcome(answer) });
    return answer;
  }

  /** The outcomes the rule allows for the last call under `limit`: one, or both when a call before
   * it or the call itself straddled an edge. */
  allowed(limit: number): Counted[] {
    const last = this.#calls.at(-1);
    if (!last) throw new Error('no call made yet');
    const allowed = new Set<Counted>();
    for (let w = this.windowOf(last.from); w <= this.windowOf(last.to); w++) {
      const [least, most] = this.#servedIn(w, this.#calls.slice(0, -1));
      if (least < limit) allowed.add('served');
      if (most >= limit) allowed.add('refused');
    }
    return [...allowed];
  }

  /**
   * Calls `send` one at a time until an answer is refused, each held to the rule under `limit`
   * (asserted); returns that refusal. Fails after `cap` calls without one.
   */
  async untilRefused<T>(
    send: () => Promise<T>,
    isServed: (answer: T) => boolean,
    limit: number,
    cap: number,
  ): Promise<T> {
    for (let i = 1; i <= cap; i++) {
      const answer = await this.call(send, (a) => (isServed(a) ? 'served' : 'refused'));
      expect(this.allowed(limit), `call ${i}`).toContain(this.last());
      if (!isServed(answer)) return answer;
    }
    throw new Error(`no refusal in ${cap} calls under a limit of ${limit}`);
  }

  /** The last call's outcome. */
  last(): Counted {
    const last = this.#calls.at(-1);
    if (!last) throw new Error('no call made yet');
    return last.outcome;
  }

  /** How many calls were served in window `w`: [surely, at most]. */
  servedIn(w: number): [number, number] {
    return this.#servedIn(w, this.#calls);
  }

  count(outcome: Counted): number {
    return this.#calls.filter((c) => c.outcome === outcome).length;
  }

  #servedIn(w: number, calls: Call[]): [number, number] {
    const served = calls.filter((c) => c.outcome === 'served');
    const at = (ms: number) => this.windowOf(ms);
    const surely = served.filter((c) => at(c.from) === w && at(c.to) === w).length;
    const atMost = served.filter((c) => at(c.from) <= w && at(c.to) >= w).length;
    return [surely, atMost];
  }
}

/**
 * Runs `burst` (concurrent calls on a subject of its own) and returns its result once a run lay
 * within one UTC minute: a run that crossed an edge is run again, on a fresh subject. A burst of a
 * few seconds that crossed one edge is followed by one that cannot reach the next.
 */
export async function inOneMinute<T>(burst: () => Promise<T>): Promise<T> {
  for (let run = 0; run < 2; run++) {
    const from = Date.now();
    const result = await burst();
    if (minuteOf(from) === minuteOf(Date.now())) return result;
  }
  throw new Error('two runs in a row crossed a minute edge: a burst must take well under a minute');
}
