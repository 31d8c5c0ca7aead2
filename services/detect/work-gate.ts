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
// wait, fairly: oldest first, but an image that does not fit yet does not hold up a smaller one that
// does; large images leave a lane of slots and memory to small ones, and one that has waited long
// enough is not overtaken any more; one client (address or account) holds at most half the slots and
// half the budget. That wait is bounded because admissions are. An image that could never fit the
// budget is refused at once (4004), the one refusal here. An image's memory stays counted until its
// decoder has really ended (a killed decoder process keeps its memory until it exits).

import { ApiError } from '../../lib/common/errors.ts';
import type { StillHeld } from './scoring/image-scorer.ts';

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

/**
 * On a closed gate's refusals only: the edge sends such a request to another detect pod (the chart's
 * retry policy, retriable-headers) and strips the header from what reaches the client. A busy pod's
 * refusals go back to the client instead: retrying them would add load where there is too much.
 */
export const DRAINING_HEADER = 'x-detect-draining';

/** An image whose decode estimate is at most this goes in the small lane (~8 MP baseline JPEG and under). */
export const SMALL_IMAGE_DECODE_BYTES = 32 * 1024 * 1024;
/**
 * An image predicted to cost more CPU than this (image-cost.ts) is heavy: it keeps out of the small
 * lane like a large one, whatever its memory (~7 MP of PNG, a 40 MP progressive JPEG and up).
 */
export const HEAVY_IMAGE_CPU_MS = 1_000;
/** A body of at most this many bytes is small: it may use the share of the upload bytes kept for small ones. */
export const SMALL_BODY_BYTES = 8 * 1024 * 1024;
/** The share of MAX_UPLOAD_BYTES_IN_PROGRESS larger bodies leave to small ones. */
const SMALL_BODY_SHARE = 1 / 8;
/** Decode memory large images leave free for small ones while another large one runs (at most a quarter). */
const SMALL_LANE_BYTES = 96 * 1024 * 1024;
/** A large image waiting this long for room is no longer overtaken by other large ones. */
export const PRIORITY_AFTER_MS = 2_000;
/**
 * An image waiting this long goes ahead of the fair queue's order (oldest first), so that a costly
 * image is served even while lighter ones from ever new clients keep arriving.
 */
export const FAIR_WAIT_MS = 10_000;

interface Decoding {
  memory: number;
  small: boolean;
  client: string | undefined;
  /** When it asked for a slot (the gate's clock). */
  since: number;
  /** Its virtual start and finish times in the fair queue: offered slots in order of finish. */
  start: number;
  finish: number;
  /** Arrival order, for ties. */
  seq: number;
}

export interface Admission {
  /**
   * Counts this request against `client` too (a client known only after authentication, e.g. the
   * account of a key); false, changing nothing, when that client is at its bound.
   */
  claim(client: string): boolean;
  /**
   * Accounts for `bytes` more of this request's body; false, changing nothing, past the byte bound —
   * for a body past SMALL_BODY_BYTES, past the bound less the share kept for small bodies.
   */
  holdBytes(bytes: number): boolean;
  /** Returns the body's bytes (it has been handed to its decoder); idempotent. */
  releaseBytes(): void;
  /** Returns everything this admission holds; idempotent, so it can be tied to several events. */
  release(): void;
}

export class WorkGate {
  readonly #opts: WorkGateOptions;
  #admitted = 0;
  #bytes = 0;
  /** Bytes held by bodies past SMALL_BODY_BYTES. */
  #bytesLarge = 0;
  readonly #smallBodyBytes: number;
  /** The fair queue's virtual clock: the start tag of the image started last. */
  #virtual = 0;
  /** Each client's last virtual finish time (images of a client queue behind its earlier ones). */
  readonly #clientFinish = new Map<string, number>();
  #seq = 0;
  readonly #perClient = new Map<string, number>();
  #running = 0;
  #decoding = 0;
  #runningLarge = 0;
  #decodingLarge = 0;
  /** Slots and decode memory large images leave to small ones (while another large one runs). */
  readonly #smallSlots: number;
  readonly #smallBytes: number;
  readonly #decodingPerClient = new Map<string, { running: number; memory: number }>();
  readonly #heldSince = new Set<Decoding>();
  #heldAfter = 0;
  readonly #now: () => number;
  readonly #waiting: Array<{ image: Decoding; start: () => void }> = [];
  #closed = false;

  constructor(opts: WorkGateOptions, now: () => number = performance.now.bind(performance)) {
    this.#opts = opts;
    this.#now = now;
    this.#smallSlots = opts.active > 1 ? Math.max(1, Math.floor(opts.active / 4)) : 0;
    this.#smallBytes = Math.min(SMALL_LANE_BYTES, Math.floor(opts.decodeBytes / 4));
    this.#smallBodyBytes = Math.floor(opts.uploadBytes * SMALL_BODY_SHARE);
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
    const retryAfter = { 'retry-after': String(this.#opts.retryAfterSeconds) };
    return this.#closed
      ? new ApiError('UNAVAILABLE', 'Shutting down; try another replica', {
          ...retryAfter,
          [DRAINING_HEADER]: '1',
        })
      : new ApiError('UNAVAILABLE', `Busy: ${what}; try again shortly`, retryAfter);
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
        const large = held + bytes > SMALL_BODY_BYTES;
        // Turning large, the body's bytes so far move out of the small bodies' share with it.
        const largeMore = large ? (held > SMALL_BODY_BYTES ? bytes : held + bytes) : 0;
        if (largeMore > 0 && this.#bytesLarge + largeMore > this.#opts.uploadBytes - this.#smallBodyBytes)
          return false;
        this.#bytes += bytes;
        this.#bytesLarge += largeMore;
        held += bytes;
        return true;
      },
      releaseBytes: () => {
        this.#bytes -= held;
        if (held > SMALL_BODY_BYTES) this.#bytesLarge -= held;
        held = 0;
      },
      release: () => {
        if (released) return;
        released = true;
        this.#admitted -= 1;
        this.#bytes -= held;
        if (held > SMALL_BODY_BYTES) this.#bytesLarge -= held;
        held = 0;
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
   * estimate) fits in the decode budget — the image's lane's share of it, and its client's (see
   * `#startWaiting`). Throws 4004 for an image whose estimate alone is over the budget: it could never
   * be decoded here. `work` is handed `stillHeld`: memory its image goes on holding after `work` has
   * settled (a killed decoder, until its process has exited) stays counted until that promise settles.
   */
  async score<T>(
    work: (stillHeld: StillHeld) => Promise<T>,
    memory = 0,
    client?: string,
    costMs = 0,
  ): Promise<T> {
    if (memory > this.#opts.decodeBytes) {
      throw new ApiError(
        'DIMENSIONS_EXCEEDED',
        `Image too large to decode here: it needs about ${mib(memory)} MiB, over this server's decode memory budget of ${mib(this.#opts.decodeBytes)} MiB`,
      );
    }
    const image: Decoding = {
      memory,
      small: memory <= SMALL_IMAGE_DECODE_BYTES && costMs <= HEAVY_IMAGE_CPU_MS,
      client,
      since: this.#now(),
      ...this.#tag(client, costMs),
      seq: this.#seq++,
    };
    await new Promise<void>((start) => {
      this.#waiting.push({ image, start });
      this.#startWaiting();
    });
    const held: Promise<void>[] = [];
    try {
      return await work((released) => held.push(released));
    } finally {
      this.#running -= 1;
      if (!image.small) this.#runningLarge -= 1;
      this.#clientOf(image).running -= 1;
      if (held.length === 0) this.#release(image);
      else {
        this.#heldSince.add(image);
        this.#heldAfter += image.memory;
        void Promise.allSettled(held).then(() => this.#release(image));
      }
      this.#startWaiting();
    }
  }

  /**
   * The image's finish tag in the fair queue (start-time fair queuing, by predicted CPU): it starts
   * where its client's previous image finishes, or at the virtual clock if that is later, and finishes
   * its cost later. A client sending costly images pushes only its own later images back; another
   * client's light image is tagged near the clock and offered the next slot.
   */
  #tag(client: string | undefined, costMs: number): { start: number; finish: number } {
    const start = Math.max(this.#virtual, client === undefined ? 0 : (this.#clientFinish.get(client) ?? 0));
    const finish = start + Math.max(1, costMs);
    if (client !== undefined) this.#clientFinish.set(client, finish);
    return { start, finish };
  }

  /** Memory counted for images whose work has settled but whose decoder has not yet exited. */
  get heldAfterAnswer(): number {
    return this.#heldAfter;
  }

  #release(image: Decoding): void {
    this.#decoding -= image.memory;
    if (!image.small) this.#decodingLarge -= image.memory;
    const client = this.#clientOf(image);
    client.memory -= image.memory;
    if (image.client !== undefined && client.running === 0 && client.memory === 0)
      this.#decodingPerClient.delete(image.client);
    if (this.#heldSince.delete(image)) this.#heldAfter -= image.memory;
    this.#startWaiting();
  }

  #clientOf(image: Decoding): { running: number; memory: number } {
    if (image.client === undefined) return { running: 0, memory: 0 };
    let held = this.#decodingPerClient.get(image.client);
    if (!held) {
      held = { running: 0, memory: 0 };
      this.#decodingPerClient.set(image.client, held);
    }
    return held;
  }

  /**
   * Whether `image` may start now. Every image needs a slot and its memory within the budget. Lanes:
   * a large image (estimate over SMALL_IMAGE_DECODE_BYTES) may not take the slots and memory kept for
   * small ones (`#smallSlots`, `#smallBytes`), unless it is the only large one (the largest image
   * allowed must still be decodable, alone). A client holding images already may hold at most half the
   * slots and half the budget; its first image is bounded by the budget only.
   */
  #fits(image: Decoding): boolean {
    const { active, decodeBytes } = this.#opts;
    if (this.#running >= active || this.#decoding + image.memory > decodeBytes) return false;
    if (!image.small && this.#runningLarge > 0) {
      if (this.#runningLarge >= active - this.#smallSlots) return false;
      if (this.#decodingLarge + image.memory > decodeBytes - this.#smallBytes) return false;
    }
    return this.#clientFits(image);
  }

  #clientFits(image: Decoding): boolean {
    const held = image.client === undefined ? undefined : this.#decodingPerClient.get(image.client);
    if (!held || (held.running === 0 && held.memory === 0)) return true;
    return (
      held.running < Math.ceil(this.#opts.active / 2) &&
      held.memory + image.memory <= this.#opts.decodeBytes / 2
    );
  }

  #take(image: Decoding): void {
    // The clock moves to the started image's start tag (never back); clients whose last image
    // finished before it keep no tag (a new one starts at the clock anyway).
    this.#virtual = Math.max(this.#virtual, image.start);
    if (this.#clientFinish.size > 1_024)
      for (const [name, finish] of this.#clientFinish)
        if (finish <= this.#virtual) this.#clientFinish.delete(name);
    this.#running += 1;
    this.#decoding += image.memory;
    if (!image.small) {
      this.#runningLarge += 1;
      this.#decodingLarge += image.memory;
    }
    const client = this.#clientOf(image);
    client.running += 1;
    client.memory += image.memory;
  }

  /**
   * Starts every waiting image that fits, in fair-queue order (finish tag, then arrival; images that
   * have waited FAIR_WAIT_MS first, oldest first); one that does
   * not fit does not hold up the ones behind it (a small image is not kept behind a large one it fits
   * beside). A large image that has waited PRIORITY_AFTER_MS for room (not for its client's share)
   * stops later large images from overtaking it, so that the room it needs frees up: large images are
   * not starved by a stream of smaller large ones, and small images keep their own lane meanwhile.
   */
  #startWaiting(): void {
    const now = this.#now();
    const aged = (image: Decoding) => now - image.since >= FAIR_WAIT_MS;
    this.#waiting.sort((a, b) => {
      const [x, y] = [a.image, b.image];
      if (aged(x) !== aged(y)) return aged(x) ? -1 : 1;
      if (aged(x)) return x.seq - y.seq;
      return x.finish - y.finish || x.seq - y.seq;
    });
    let largeBlocked = false;
    for (let i = 0; i < this.#waiting.length; ) {
      const next = this.#waiting[i] as { image: Decoding; start: () => void };
      const { image } = next;
      if (!(largeBlocked && !image.small) && this.#fits(image)) {
        this.#waiting.splice(i, 1);
        this.#take(image);
        next.start();
        continue;
      }
      if (!image.small && this.#clientFits(image) && now - image.since >= PRIORITY_AFTER_MS)
        largeBlocked = true;
      i++;
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
