// Run by ipv6-clients.test.ts inside a network namespace of its own (unshare -n), whose loopback holds
// fd00:1::1–60 (one /64) and fd00:2::1 (another): the embedded app listens dual-stack on [::], and
// clients connect from those addresses and from 127.0.0.2/127.0.0.3 (seen by the socket as
// ::ffff:127.0.0.x). Prints one JSON line: the statuses per source and what the server saw.

import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import sharp from 'sharp';
import { embeddedApp } from '../support/embedded-app.ts';
import { FakeClassifier } from '../support/fake-classifier.ts';

const ANON_PER_MINUTE = Number(process.env.ANON_PER_MINUTE);
const limits = { perMinute: ANON_PER_MINUTE, perDay: 1000 };

const built = await embeddedApp({
  env: { ANON_PER_MINUTE: String(ANON_PER_MINUTE), ANON_PER_DAY: '1000' },
  classifier: new FakeClassifier(),
  // The quota store's clock, set (2031-03-14T10:00:30Z): every request of the run in one minute window.
  now: () => Date.UTC(2031, 2, 14, 10, 0, 30),
});
const { app, quotaStore } = built;
const seen = new Set<string>();
await app.listen({ host: '::', port: 0, ipv6Only: false });
const { port } = app.server.address() as AddressInfo;
app.server.on('request', (req) => seen.add(req.socket.remoteAddress ?? ''));

const jpeg = await sharp({ create: { width: 16, height: 16, channels: 3, background: '#808080' } })
  .jpeg()
  .toBuffer();

function detect(localAddress: string): Promise<number> {
  const host = localAddress.includes(':') ? '::1' : '127.0.0.1';
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host,
        port,
        localAddress,
        method: 'POST',
        path: '/api/public/detect',
        headers: { 'content-type': 'image/jpeg', 'content-length': jpeg.length },
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(jpeg);
  });
}

const statuses = async (sources: string[]) => {
  const out: Record<string, number> = {};
  for (const source of sources) {
    const status = await detect(source);
    out[status] = (out[status] ?? 0) + 1;
  }
  return out;
};

const onePrefix = Array.from({ length: 60 }, (_, i) => `fd00:1::${(i + 1).toString(16)}`);
const result = {
  onePrefix: await statuses(onePrefix),
  otherPrefix: await statuses(['fd00:2::1', 'fd00:2::1']),
  ipv4First: await statuses(Array.from({ length: ANON_PER_MINUTE + 2 }, () => '127.0.0.2')),
  ipv4Second: await statuses(['127.0.0.3']),
  /** The peer addresses the server's sockets saw. */
  seen: [...seen].sort(),
  /** Requests counted in this minute, per anonymous quota subject. */
  counted: Object.fromEntries(
    await Promise.all(
      ['fd00:1::/64', 'fd00:2::/64', '127.0.0.2', '127.0.0.3', '::ffff:127.0.0.2', '::/64'].map(
        async (key) => [key, (await quotaStore.peek(`anon:ip:${key}`, limits)).minute.used] as const,
      ),
    ),
  ),
};
await app.close();
await built.model.close?.();
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
