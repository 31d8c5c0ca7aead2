// Backpressure. A request takes a ticket when it arrives (before its body is read), so that uploads,
// waiting images and running images together stay within `active + queued`. Past that the caller gets
// 503/5001 with Retry-After at once: memory stays bounded instead of growing with the queue.
// Only `active` tickets are handed to the scoring pool at the same time; the others wait in FIFO order.

import { ApiError } from '../common/errors.ts';

export interface Ticket {
  /** Runs `work` once one of the `active` slots is free. */
  run<T>(work: () => Promise<T>): Promise<T>;
  /** Returns the ticket; idempotent, so it can be tied to both response finish and close. */
  release(): void;
}

export class WorkGate {
  readonly #active: number;
  readonly #capacity: number;
  readonly #retryAfterSeconds: number;
  #admitted = 0;
  #running = 0;
  readonly #waiting: Array<() => void> = [];
  #closed = false;

  constructor(opts: { active: number; queued: number; retryAfterSeconds: number }) {
    this.#active = opts.active;
    this.#capacity = opts.active + opts.queued;
    this.#retryAfterSeconds = opts.retryAfterSeconds;
  }

  get admitted(): number {
    return this.#admitted;
  }

  get running(): number {
    return this.#running;
  }

  /** Takes a ticket or throws 503/5001. */
  admit(): Ticket {
    if (this.#closed || this.#admitted >= this.#capacity) {
      throw new ApiError(
        'UNAVAILABLE',
        this.#closed
          ? 'Shutting down; try another replica'
          : 'Busy: too many images in progress; try again shortly',
        { 'retry-after': String(this.#retryAfterSeconds) },
      );
    }
    this.#admitted += 1;
    let released = false;
    return {
      run: (work) => this.#run(work),
      release: () => {
        if (released) return;
        released = true;
        this.#admitted -= 1;
      },
    };
  }

  /** Refuses new tickets (shutdown); tickets already taken still run. */
  close(): void {
    this.#closed = true;
  }

  async #run<T>(work: () => Promise<T>): Promise<T> {
    if (this.#running >= this.#active) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#running += 1;
    try {
      return await work();
    } finally {
      // Hand the slot straight to the next waiter, or free it.
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running -= 1;
    }
  }
}
