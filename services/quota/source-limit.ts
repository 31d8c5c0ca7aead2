// How many new connections one source may open at the edge: a token bucket per client (an IPv4
// address, an IPv6 /64: lib/common/client-key.ts), `perSecond` a second with bursts of `burst`. Envoy
// asks before it reads a byte of each connection (rate-limit-service.ts) and closes the refused ones
// at once. A source that reconnects as fast as it can therefore holds at most burst + perSecond × the
// longest a connection of its kind lives (docs/edge.md), whatever its reconnect rate. Per process
// (one per gateway pod): it bounds that pod's Envoy, which is what one source can fill.

import { clientKey } from '../../lib/common/client-key.ts';

export interface SourceLimits {
  /** New connections a second one source may open, on average. */
  perSecond: number;
  /** New connections one source may open at once (the bucket's size). */
  burst: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Sources remembered at most; past it the longest-unseen are forgotten (they come back full). */
const MAX_SOURCES = 100_000;

export class SourceConnectionLimiter {
  readonly #limits: SourceLimits;
  readonly #ipv6PrefixLength: number;
  readonly #now: () => number;
  readonly #buckets = new Map<string, Bucket>();
  admitted = 0;
  refused = 0;

  constructor(limits: SourceLimits, ipv6PrefixLength: number, now: () => number = () => performance.now()) {
    this.#limits = limits;
    this.#ipv6PrefixLength = ipv6PrefixLength;
    this.#now = now;
  }

  /** One new connection from `address`: true if its source may open it (and it is counted). */
  admit(address: string): boolean {
    const key = clientKey(address, this.#ipv6PrefixLength);
    const now = this.#now();
    const { perSecond, burst } = this.#limits;
    const bucket = this.#buckets.get(key);
    const tokens = bucket ? Math.min(burst, bucket.tokens + ((now - bucket.at) / 1000) * perSecond) : burst;
    // Most recently seen last (Map order), so that the first entries are the ones to forget.
    this.#buckets.delete(key);
    if (tokens < 1) {
      this.#buckets.set(key, { tokens, at: now });
      this.refused += 1;
      return false;
    }
    this.#buckets.set(key, { tokens: tokens - 1, at: now });
    if (this.#buckets.size > MAX_SOURCES) this.#forget(now);
    this.admitted += 1;
    return true;
  }

  /** Sources remembered now. */
  get sources(): number {
    return this.#buckets.size;
  }

  /** Forgets every full bucket (the same as a new one), else the longest-unseen tenth. */
  #forget(now: number): void {
    const { perSecond, burst } = this.#limits;
    for (const [key, b] of this.#buckets) {
      if (b.tokens + ((now - b.at) / 1000) * perSecond >= burst) this.#buckets.delete(key);
    }
    if (this.#buckets.size <= MAX_SOURCES * 0.9) return;
    let drop = this.#buckets.size - Math.floor(MAX_SOURCES * 0.9);
    for (const key of this.#buckets.keys()) {
      if (drop-- <= 0) break;
      this.#buckets.delete(key);
    }
  }
}
