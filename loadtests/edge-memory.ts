// Envoy's memory with 50 MiB uploads in flight, with the chart's retry buffer (the body kept so that a
// detect request can be retried on another pod: envoy.upstreams.detect.retry.bufferBytes) and without
// retries, in front of a stand-in detect pod that reads at a given rate (a detect pod slower than the
// client is the case where Envoy holds the most). Real Envoy, quota service and redis-server on loopback.
//
//   npx tsx loadtests/edge-memory.ts [UPLOADS] [READ_MIB_PER_S] [BUFFER_MIB,…]
//
// Defaults: 8 uploads, 20 MiB/s (0: as fast as it can), retry buffers 0 (retries off) and the chart's.
// Prints, per configuration, Envoy's resident memory before and at its peak (VmRSS sampled every 50 ms
// from /proc) and the answers. Figures only: nothing is asserted.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { spawnChild } from '../test/support/children.ts';
import { startEdgeEnvoy } from '../test/support/edge-envoy.ts';
import { startQuotaServer } from '../test/support/quota-process.ts';
import { RedisServer } from '../test/support/redis-server.ts';
import { listeningPort, ROOT } from '../test/support/server-process.ts';

const uploads = Number(process.argv[2] ?? 8);
const readMiBPerS = Number(process.argv[3] ?? 20);
const buffers = process.argv[4]?.split(',').map(Number);
const BODY = new Uint8Array(50 * 1024 * 1024);
const MiB = 1024 * 1024;

function rssBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1] ?? 0) * 1024;
}

const redis = await RedisServer.start();
const quota = await startQuotaServer({
  REDIS_URL: redis.url,
  TRUSTED_PROXY_HOPS: '1',
  ANON_PER_MINUTE: '100000',
  ANON_PER_DAY: '100000',
});
const upstream = spawnChild('fake detect', process.execPath, ['test/support/fake-detect-upstream.mjs'], {
  cwd: ROOT,
  env: { ...process.env, FAKE_DETECT_READ_BYTES_PER_S: String(readMiBPerS * MiB) },
});
try {
  const port = await listeningPort(upstream, 10_000);
  console.log(`${uploads} uploads of 50 MiB at once; the detect stand-in reads ${readMiBPerS} MiB/s`);
  const configs: Array<[string, Record<string, number>]> = buffers
    ? buffers.map((b): [string, Record<string, number>] =>
        b === 0
          ? ['retries off', { 'envoy.upstreams.detect.retry.attempts': 0 }]
          : [`retry buffer ${b} MiB`, { 'envoy.upstreams.detect.retry.bufferBytes': b * MiB }],
      )
    : [
        ['retries off', { 'envoy.upstreams.detect.retry.attempts': 0 }],
        ['chart defaults', {}],
      ];
  for (const [name, set] of configs) {
    const edge = await startEdgeEnvoy({
      quotaPort: quota.port,
      detectPorts: [port],
      edgeSecret: randomBytes(24).toString('hex'),
      set,
    });
    try {
      const before = rssBytes(edge.pid);
      let peak = before;
      const sampler = setInterval(() => {
        peak = Math.max(peak, rssBytes(edge.pid));
      }, 50);
      const started = Date.now();
      const answers = await Promise.all(
        Array.from({ length: uploads }, () =>
          fetch(`${edge.url}/api/public/detect`, {
            method: 'POST',
            headers: { 'content-type': 'image/jpeg' },
            body: BODY,
          }).then(
            async (r) => {
              await r.arrayBuffer();
              return String(r.status);
            },
            (err: Error) => err.message,
          ),
        ),
      );
      clearInterval(sampler);
      const counts = new Map<string, number>();
      for (const a of answers) counts.set(a, (counts.get(a) ?? 0) + 1);
      console.log(
        `${name}: Envoy RSS ${(before / MiB).toFixed(1)} MiB before, ${(peak / MiB).toFixed(1)} MiB at peak ` +
          `(+${((peak - before) / MiB).toFixed(1)} MiB, ${((peak - before) / MiB / uploads).toFixed(1)} MiB per upload); ` +
          `answers ${JSON.stringify(Object.fromEntries(counts))} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );
    } finally {
      await edge.stop();
    }
  }
} finally {
  await upstream.stop(2_000);
  await quota.stop();
  await redis.stop();
}
