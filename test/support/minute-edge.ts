// For tests of separate server processes on Redis TIME, which take no test clock: a test that fills a
// per-minute window there must not straddle the UTC minute boundary (the window would reset half-way),
// so it waits out the last seconds of a minute when it starts too close to one. In-process tests set
// the quota store's clock instead (MemoryQuotaStore and RedisQuotaStore take one).

export async function awayFromMinuteEdge(marginMs = 5_000): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < marginMs) await new Promise((r) => setTimeout(r, left + 200));
}
