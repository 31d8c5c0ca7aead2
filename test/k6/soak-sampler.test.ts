// The soak sampler (loadtests/soak-sampler.ts) against stand-ins: a fake kubectl that lists two detect
// pods and a gateway pod and runs `exec … node -e` here, and two metrics endpoints on loopback — one
// whose RSS grows 1 MiB a second (a leak), one flat. The sampler must read both through the gateway's
// exec path and print the leak's slope (3600 MiB/h) and the flat pod's (≈0).

import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { soak } from '../../loadtests/soak-sampler.ts';
import { ROOT } from '../support/server-process.ts';

const MiB = 1024 * 1024;
const servers: Server[] = [];
let port = 0;

function metricsServer(address: string, rss: () => number, listenPort: number): Promise<Server> {
  const server = createServer((_req, res) => {
    res.end(
      [
        '# HELP nsfwdetector_process_resident_memory_bytes Resident memory size in bytes.',
        `nsfwdetector_process_resident_memory_bytes ${Math.round(rss())}`,
        `nsfwdetector_nodejs_heap_size_used_bytes ${50 * MiB}`,
        'nsfwdetector_process_start_time_seconds 1700000000',
        '',
      ].join('\n'),
    );
  });
  servers.push(server);
  return new Promise((resolve) => server.listen(listenPort, address, () => resolve(server)));
}

beforeAll(async () => {
  const began = Date.now();
  const leaking = await metricsServer('127.0.0.1', () => 100 * MiB + ((Date.now() - began) / 1000) * MiB, 0);
  port = (leaking.address() as { port: number }).port;
  await metricsServer('127.0.0.2', () => 200 * MiB, port);
});

afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});

it('samples every detect pod through a gateway pod and prints the slope of RSS and heap after the warm-up', async () => {
  process.env.FAKE_KUBECTL_PODS = JSON.stringify([
    { name: 'detect-leaking', ip: '127.0.0.1', component: 'detect' },
    { name: 'detect-flat', ip: '127.0.0.2', component: 'detect', restarts: 1 },
    { name: 'gateway-a', ip: '127.0.0.3', component: 'gateway' },
  ]);
  const lines: string[] = [];
  const report = await soak({
    sampler: {
      kubectl: `${ROOT}test/support/fake-kubectl.sh`,
      namespace: 'ns',
      release: 'nsfwdetector',
      via: 'exec',
      port,
    },
    intervalS: 1,
    durationS: 6,
    warmupS: 1,
    onLine: (l) => lines.push(l),
  });
  console.log(lines.join('\n'));
  expect(lines.length).toBeGreaterThanOrEqual(4);
  expect(lines[0]).toMatch(
    /detect-leaking rss=\d+\.\dMiB heap=50\.0MiB restarts=0 {2}\| {2}detect-flat rss=200\.0MiB/,
  );
  const leaking = report.perPod.find((p) => p.pod === 'detect-leaking');
  const flat = report.perPod.find((p) => p.pod === 'detect-flat');
  expect(leaking?.samples).toBeGreaterThanOrEqual(3);
  // 1 MiB a second is 3600 MiB an hour; the sampler's clock and the server's agree within a few percent.
  expect(leaking?.rssSlopeMiBPerHour).toBeGreaterThan(3600 * 0.8);
  expect(leaking?.rssSlopeMiBPerHour).toBeLessThan(3600 * 1.2);
  expect(leaking?.heapSlopeMiBPerHour).toBe(0);
  expect(flat?.rssSlopeMiBPerHour).toBe(0);
  expect(report.podsChanged).toBe(false);
  expect(report.perPod.every((p) => p.restarts === 0)).toBe(true);
}, 60_000);
