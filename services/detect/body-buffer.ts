// An upload gathered into one buffer as it arrives, the buffer growing as the walked prefixes do
// (streamed-header.ts: 1, 4, 16 MiB) up to the most the body can be. Reserving a body's announced
// length at its first byte made four hostile 52 MB uploads, refused after their first few MiB, hold
// 208 MB of external memory at once: enough to bring on a full collection, a pause of every request's
// event loop. Grown as it arrives, such a body has cost 1 + 4 + 16 MiB when it is refused. An ordinary
// photo (at most 1 MiB announced) still takes one exact allocation; a large raw body copies its first
// 21 MiB once more (50 MB in 64 KiB chunks, thread CPU, medians of 11, host busy: 49–60 ms against
// 43–47 ms into one allocation, most of either the first touch of fresh pages).
//
// Bytes once written are never rewritten, and a grown buffer's older ones stay as they were: a view of
// what had arrived (`view()`) keeps its contents while the body goes on, as the prefix walks need.

import { releaseBuffer } from './scoring/release-buffer.ts';
import { FIRST_PREFIX_BYTES, PREFIX_GROWTH } from './streamed-header.ts';

export class BodyBuffer {
  #buffer: Buffer;
  #size = 0;
  /** The most the body can be: its Content-Length, or the size limit when that is not known. */
  readonly #most: number;

  constructor(most: number) {
    this.#most = most;
    this.#buffer = Buffer.allocUnsafeSlow(Math.min(most, FIRST_PREFIX_BYTES));
  }

  get size(): number {
    return this.#size;
  }

  /** Appends `chunk`; false (nothing appended) when it would take the body past its most. */
  append(chunk: Uint8Array): boolean {
    const needed = this.#size + chunk.length;
    if (needed > this.#most) return false;
    if (needed > this.#buffer.length) {
      const grown = Buffer.allocUnsafeSlow(
        Math.min(this.#most, Math.max(needed, this.#buffer.length * PREFIX_GROWTH)),
      );
      this.#buffer.copy(grown, 0, 0, this.#size);
      this.#buffer = grown;
    }
    this.#buffer.set(chunk, this.#size);
    this.#size = needed;
    return true;
  }

  /** What has arrived so far, in place. */
  view(): Buffer {
    return this.#buffer.subarray(0, this.#size);
  }

  /**
   * The whole body in a buffer of its own size: an upload is held and counted at its size, and a
   * buffer it owns whole is handed to a scoring thread without a copy (worker-pool-scorer.ts). A body
   * shorter than the most it could be (a form's part, a chunked body) is copied once, as joining its
   * chunks did.
   */
  take(): Buffer {
    const buffer = this.#buffer;
    if (buffer.length === this.#size) return buffer;
    const exact = Buffer.allocUnsafeSlow(this.#size);
    buffer.copy(exact, 0, 0, this.#size);
    releaseBuffer(buffer);
    return exact;
  }

  /** Frees the buffer now, not at the next collection (a refused body). Views of it become empty. */
  release(): void {
    releaseBuffer(this.#buffer);
  }
}
