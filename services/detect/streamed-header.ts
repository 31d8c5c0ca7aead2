// Refusing a hostile header while its body still streams in. A PNG of 4.3 M empty chunks passes the
// walk's bound (262,144 chunks) in its first ~3 MB, yet read whole it costs the main thread ~50 MB of
// fresh pages to copy into and a full collection for its external memory before the walk refuses it.
// So while a body arrives, its first 1, 4, 16 … MiB are walked (in the walks' shared slices), and once
// a walk passes its bound the request is answered what the whole body would have been answered:
// detect's own header steps (`verdict`) run on the prefix. That is exact, not a guess — a walk throws
// WalkBoundError only after visiting every item it counts inside the data, so the same walk over any
// longer body that begins with these bytes throws the same error; and the steps before the walk (the
// sniff, the declared type, the first bytes' header fields) read no further than the prefix
// (streamed-header.test.ts holds both to the whole-body answer, for every corpus and hostile file).
// Anything else — a prefix cut inside a chunk, a truncated segment — waits for the whole body.
// Every framing is watched: a raw body with a Content-Length, a chunked one (its most: the size limit),
// and the file part of a form (its most: the form's length). The image's answer is exact in each; what
// the rest of the request might still have got wrong (a form's second file, a chunked body past the
// size limit) is not waited for: the first fault found is the answer, as anywhere in intake.

import type { ApiError } from '../../lib/common/errors.ts';
import { isApiError } from '../../lib/common/errors.ts';
import { headerWalk } from './image/probe.ts';
import { type Walk, WalkBoundError, walkInSlices } from './image/probe-bytes.ts';
import { signatureFormat } from './image/sniff.ts';

/**
 * The first prefix walked: a file whose walk fails within it costs little to read whole, and bodies no
 * longer than this are never walked twice.
 */
export const FIRST_PREFIX_BYTES = 1 << 20;

/**
 * Each prefix walked is this many times the last (and at most half the body): the walks of an
 * ordinary body add about half of its own walk (measured: a 34 MB noise JPEG, whole walk 8–16 ms,
 * its 1, 4 and 16 MiB prefixes 5–8 ms; with doubling they cost 20–30 ms), and a body past its bound is
 * refused at most this many times later than it could be — the 4.3 M-chunk PNG passes its bound at
 * 3.1 MB and is refused at 4 MiB either way.
 */
export const PREFIX_GROWTH = 4;

/** What intake tells the watch as the body arrives. */
export interface HeaderWatch {
  /**
   * The body's first `prefix.length` bytes have arrived, in a buffer whose bytes stay as they are
   * (body-buffer.ts: later bytes go past the view's end, or into a grown copy).
   */
  grew(prefix: Uint8Array): void;
  /** No more bytes will come (the body ended, failed or was refused): a walk in progress stops. */
  stop(): void;
}

/**
 * Detect's header steps for a body (sniff, declared type, walk, probe): rejects with the ApiError the
 * body is refused with, resolves when its header passes.
 */
export type HeaderVerdict = (bytes: Uint8Array) => Promise<unknown>;

/** Runs `walk` until it ends or `stopped()` says to give up (then undefined), pausing where it pauses. */
function* untilStopped<T>(walk: Walk<T>, stopped: () => boolean): Walk<T | undefined> {
  for (;;) {
    if (stopped()) return undefined;
    const step = walk.next();
    if (step.done) return step.value;
    yield;
  }
}

/**
 * Watches a body of at most `totalBytes` (its Content-Length, else the most it may be) as it streams in. Calls `refuse` at most once,
 * with the ApiError `verdict` gives a prefix whose walk passed its bound; never for a body that would
 * not be refused whole. Bodies of at most `firstPrefixBytes` are not watched (undefined).
 */
export function watchHeader(
  totalBytes: number,
  verdict: HeaderVerdict,
  refuse: (err: ApiError) => void,
  firstPrefixBytes = FIRST_PREFIX_BYTES,
): HeaderWatch | undefined {
  if (!(totalBytes > firstPrefixBytes)) return undefined;
  let stopped = false;
  let walking = false;
  let nextAt = firstPrefixBytes;
  let latest: Uint8Array | undefined;
  const isStopped = () => stopped;

  const walkPrefix = async (prefix: Uint8Array): Promise<void> => {
    const format = signatureFormat(prefix);
    const walk = format && headerWalk(prefix, format);
    // Not a format with a long walk (or no known signature): nothing to refuse early.
    if (!walk) {
      stopped = true;
      return;
    }
    const failure = await walkInSlices(untilStopped(walk, isStopped));
    if (stopped || !(failure instanceof WalkBoundError)) return;
    // The walk's bound is passed: the whole body's answer is the prefix's (detect's own steps).
    try {
      await verdict(prefix);
    } catch (err) {
      // A fault other than a refusal is the verdict's to report (app.ts logs it); the body goes on.
      if (!stopped && isApiError(err)) {
        stopped = true;
        refuse(err);
      }
    }
  };

  const next = (): void => {
    if (stopped || walking || latest === undefined || latest.length < nextAt) return;
    const prefix = latest;
    // The whole body is walked by detect once it has arrived: a prefix of more than half of it would
    // refuse a body at most twice as early, for a second walk of nearly all of an ordinary one.
    if (prefix.length * 2 > totalBytes) return;
    walking = true;
    nextAt = prefix.length * PREFIX_GROWTH;
    walkPrefix(prefix).then(
      () => {
        walking = false;
        next();
      },
      () => {
        // A walk never rejects (its failure is its result); if anything else does, stop watching.
        stopped = true;
      },
    );
  };

  return {
    grew(prefix) {
      latest = prefix;
      next();
    },
    stop() {
      stopped = true;
      latest = undefined;
    },
  };
}
