// Backpressure, in two layers, so that a slow client can hold a connection but never the CPU.
//
// Admission: a detect request takes an `Admission` when it arrives and keeps it until it is answered
// (uploading, waiting for a scoring slot, scored). Admissions are bounded in total, per client, and by
// the image bytes they hold together; past any bound the caller gets 503/5001 with Retry-After at once,
// so memory stays bounded instead of growing with the queue.
//
// Scoring: only `active` images are handed to the scoring pool at the same time, and an image takes its
// slot only once its upload is read — and only while the memory its decoding will take (estimated from
// its header, decode-memory.ts) fits in the decode budget with the images being decoded. The others
// wait in arrival order; that wait is bounded because admissions are. An image that could never fit
// the budget is refused at once (4004), the one refusal here.

import { ApiError } from '../common/errors.ts';

export interface WorkGateOptions {
  /** Scoring slots: images in decode + inference at once. */
  active: number;
  /** Admissions at once, in total and per client. */
  uploads: number;
  uploadsPerClient: number;
  /** Image bytes the admitted requests may hold together. */
  uploadBytes: number;
  /** Decoding memory the images being scored may take together (estimates from their headers). */
  decodeBytes: number;
  retryAfterSeconds: number;
}

export interface Admission {
  /**
   * Counts this request against `client` too (a client known only after authentication, e.g. the
   * account of a key); false, changing nothing, when that client is at its bound.
   */
  claim(client: string): boolean;
  /** Accounts for `bytes` more of this request's body; false, changing nothing, past the byte bound. */
  holdBytes(bytes: number): boolean;
  /** Returns everything this admission holds; idempotent, so it can be tied to several events. */
  release(): void;
}

export class WorkGate {
  readonly #opts: WorkGateOptions;
  #admitted = 0;
  #bytes = 0;
  readonly #perClient = new Map<string, number>();
  #running = 0;
  #decoding = 0;
  readonly #waiting: Array<{ memory: number; start: () => void }> = [];
  #closed = false;

  constructor(opts: WorkGateOptions) {
    this.#opts = opts;
  }

  /** Requests admitted and not yet answered. */
  get admitted(): number {
    return this.#admitted;
  }

  /** Images holding a scoring slot. */
  get running(): number {
    return this.#running;
  }

  /** Images read and waiting for a scoring slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Body bytes held by admitted requests. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Decoding memory held by the images being scored (their estimates). */
  get decodingBytes(): number {
    return this.#decoding;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The refusal for a request that finds no room (or a closed gate). */
  busy(what = 'too many uploads in progress'): ApiError {
    return new ApiError(
      'UNAVAILABLE',
      this.#closed ? 'Shutting down; try another replica' : `Busy: ${what}; try again shortly`,
      { 'retry-after': String(this.#opts.retryAfterSeconds) },
    );
  }

  /**
   * Admits a request (counted against `client` when given), or returns undefined when the gate is
   * closed or a bound is reached. Nothing is refused here: the caller chooses the answer.
   */
  tryAdmit(client?: string): Admission | undefined {
    if (!this.hasRoom) return undefined;
    if (client !== undefined && !this.#claimClient(client)) return undefined;
    this.#admitted += 1;
    const clients: string[] = client === undefined ? [] : [client];
    let held = 0;
    let released = false;
    return {
      claim: (name) => {
        if (released || clients.includes(name)) return !released;
        if (!this.#claimClient(name)) return false;
        clients.push(name);
        return true;
      },
      holdBytes: (bytes) => {
        if (released || this.#bytes + bytes > this.#opts.uploadBytes) return false;
        this.#bytes += bytes;
        held += bytes;
        return true;
      },
      release: () => {
        if (released) return;
        released = true;
        this.#admitted -= 1;
        this.#bytes -= held;
        for (const name of clients) this.#releaseClient(name);
      },
    };
  }

  /** Whether an admission could be had now (by a client not at its own bound). */
  get hasRoom(): boolean {
    return !this.#closed && this.#admitted < this.#opts.uploads;
  }

  /**
   * Counts a request whose client is not known yet (an API key being looked up) against `client`
   * only — it takes no admission — so that one address cannot hold unbounded lookups. Returns the
   * release, or undefined at the bound.
   */
  tryLookup(client: string): (() => void) | undefined {
    const name = `lookup:${client}`;
    if (this.#closed || !this.#claimClient(name)) return undefined;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#releaseClient(name);
    };
  }

  /** Refuses new admissions (shutdown); requests already admitted still run. */
  close(): void {
    this.#closed = true;
  }

  /**
   * Runs `work` once one of the `active` scoring slots is free and `memory` (the image's decoding
   * estimate) fits in the decode budget, in arrival order. Throws 4004 for an image whose estimate
   * alone is over the budget: it could never be decoded here.
   */
  async score<T>(work: () => Promise<T>, memory = 0): Promise<T> {
    if (memory > this.#opts.decodeBytes) {
      throw new ApiError(
        'DIMENSIONS_EXCEEDED',
        `Image too large to decode here: it needs about ${mib(memory)} MiB, over this server's decode memory budget of ${mib(this.#opts.decodeBytes)} MiB`,
      );
    }
    if (this.#waiting.length > 0 || !this.#fits(memory)) {
      await new Promise<void>((start) => this.#waiting.push({ memory, start }));
    } else this.#take(memory);
    try {
      return await work();
    } finally {
      this.#running -= 1;
      this.#decoding -= memory;
      this.#startWaiting();
    }
  }

  #fits(memory: number): boolean {
    return this.#running < this.#opts.active && this.#decoding + memory <= this.#opts.decodeBytes;
  }

  #take(memory: number): void {
    this.#running += 1;
    this.#decoding += memory;
  }

  /** Starts waiting images in arrival order while the first one fits (none overtakes it). */
  #startWaiting(): void {
    for (let next = this.#waiting[0]; next && this.#fits(next.memory); next = this.#waiting[0]) {
      this.#waiting.shift();
      this.#take(next.memory);
      next.start();
    }
  }

  #claimClient(client: string): boolean {
    const count = this.#perClient.get(client) ?? 0;
    if (count >= this.#opts.uploadsPerClient) return false;
    this.#perClient.set(client, count + 1);
    return true;
  }

  #releaseClient(client: string): void {
    const count = (this.#perClient.get(client) ?? 1) - 1;
    if (count <= 0) this.#perClient.delete(client);
    else this.#perClient.set(client, count);
  }
}

function mib(bytes: number): number {
  return Math.ceil(bytes / (1024 * 1024));
}
