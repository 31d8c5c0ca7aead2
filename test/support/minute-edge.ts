// Tests that fill a per-minute window must not straddle the UTC minute boundary (the window would
// reset half-way). This waits out the last seconds of a minute when a test starts too close to it.

export async function awayFromMinuteEdge(marginMs = 5_000): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < marginMs) await new Promise((r) => setTimeout(r, left + 200));
}
