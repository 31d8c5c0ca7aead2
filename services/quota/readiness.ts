// What readiness needs of the quota stores, for every process that decides quota with them (the quota
// service; the all-in-one server, whose detect answers 503/5001 while they cannot answer): ready only
// while they answer (one bounded PING each with Redis), and a ready line printed only once they have.

import { withCause } from '../../lib/common/boot.ts';
import type { ProbeCheck } from '../../lib/common/probes.ts';
import { storeUnavailable } from './authorize.ts';

/** A readiness check: resolves while `ping` does; fails 503/5001 ("Quota store unavailable"). */
export function storesReadyCheck(ping: () => Promise<void>): ProbeCheck {
  return async () => {
    try {
      await ping();
    } catch (err) {
      throw storeUnavailable(err);
    }
    return undefined;
  };
}

/**
 * Resolves once `ping` does, trying every `everyMs`; says why it waits on stderr once, then every
 * `reportEveryMs`, so that a server started before its Redis tells what it waits for.
 */
export async function waitForStores(
  ping: () => Promise<void>,
  report: (line: string) => void,
  { everyMs = 500, reportEveryMs = 10_000 } = {},
): Promise<void> {
  let lastReport = Number.NEGATIVE_INFINITY;
  for (;;) {
    try {
      await ping();
      return;
    } catch (err) {
      const now = performance.now();
      if (now - lastReport >= reportEveryMs) {
        report(
          `waiting for the quota store to answer before scoring; not ready meanwhile (${withCause(err)})`,
        );
        lastReport = now;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
