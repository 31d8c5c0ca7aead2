// Day counters restart at 00:00 UTC (the quota's day window). A check that compares an account's day
// count before and after a phase cannot span that instant: it starts once the new day has begun.

import { setTimeout as sleep } from 'node:timers/promises';

const DAY_MS = 86_400_000;
// Past midnight before the phase starts: clocks of the machine and of Redis may differ a little.
const MARGIN_MS = 2_000;

/** How long a phase of `phaseMs` starting at `now` must wait to lie within one UTC day: 0 or until 00:00:02. */
export function utcDayWait(phaseMs: number, now: number): number {
  const left = DAY_MS - (now % DAY_MS);
  return left > phaseMs + MARGIN_MS ? 0 : left + MARGIN_MS;
}

/** Returns at once when a phase of `phaseMs` started now ends within this UTC day; else waits, saying why. */
export async function withinOneUtcDay(phaseMs: number, log: (line: string) => void): Promise<void> {
  const wait = utcDayWait(phaseMs, Date.now());
  if (wait === 0) return;
  log(
    `a day count compared over ${Math.round(phaseMs / 1000)} s would span 00:00 UTC: waiting ${Math.ceil(wait / 1000)} s for the new day`,
  );
  await sleep(wait);
}

/** The longest phase over which the node suites compare day counts (k6 through a drain, a failover, a node loss). */
export const COUNTED_PHASE_MS = 300_000;
