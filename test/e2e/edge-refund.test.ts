// A counted detect request answered 503 is never charged (the Lua filter of
// charts/nsfwdetector/files/envoy.yaml.tpl; docs/kubernetes-ha.md), with the real Envoy on the chart's
// configuration, the real quota service on a real Redis and a stand-in detect pod that answers 503 as a
// busy detect does. The 503 leaves the edge only once the quota service has taken its charge back, so
// that the count the quota service gives right after shows it, and so that a gateway killed the instant
// its 503 leaves cannot lose the refund.

import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { type EdgeEnvoy, startEdgeEnvoy } from '../support/edge-envoy.ts';
import { startUpstream, type Upstream } from '../support/fake-detect.ts';
import { startEdgeQuota } from '../support/quota-process.ts';
import type { RedisServer } from '../support/redis-server.ts';
import type { ServerProcess } from '../support/server-process.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

const EDGE_SECRET = randomBytes(24).toString('hex');
const DAY_LIMIT = 100_000;

describeWithStackTools(
  'a detect 503 behind the edge is not charged (real Envoy, quota, Redis)',
  ['helm', 'envoy'],
  { redis: true },
  () => {
    let redis: RedisServer;
    let quota: ServerProcess;
    let busy: Upstream;
    let late: Upstream;
    const started: Array<{ stop: () => Promise<unknown> }> = [];

    beforeAll(async () => {
      ({ redis, quota } = await startEdgeQuota(DAY_LIMIT));
      busy = await startUpstream('busy', { FAKE_DETECT_STATUS: '503' });
      // Answers after the edge's pooled connection to the quota service has idled out (the chart's 2 s
      // upstream idle timeout): the refund needs a new connection, the widest window for losing it.
      late = await startUpstream('late', { FAKE_DETECT_STATUS: '503', FAKE_DETECT_ANSWER_DELAY_MS: '2500' });
    }, 120_000);

    afterEach(async () => {
      await Promise.all(started.splice(0).map((s) => s.stop()));
    });

    afterAll(async () => {
      await busy?.child.stop(2_000);
      await late?.child.stop(2_000);
      await quota?.stop();
      await redis?.stop();
    });

    async function edge(detect = busy): Promise<EdgeEnvoy> {
      const e = await startEdgeEnvoy({
        quotaPort: quota.port,
        detectPorts: [detect.port],
        edgeSecret: EDGE_SECRET,
      });
      started.push(e);
      return e;
    }

    /**
     * The loopback client's anonymous count, asked of the quota service itself as Envoy's ext_authz
     * does (no edge in between): the requests left today after this one, which it charges.
     */
    async function remainingToday(): Promise<number> {
      const res = await fetch(`http://127.0.0.1:${quota.port}/ext_authz/api/public/detect`, {
        method: 'POST',
        headers: { 'x-forwarded-for': '127.0.0.1', 'content-length': '0' },
      });
      expect(res.status).toBe(200);
      return Number(res.headers.get('x-ratelimit-remaining'));
    }

    it('a detect 503 reaches the client only after its charge is taken back', async () => {
      const e = await edge();
      const rounds = 10;
      const counts = [await remainingToday()];
      for (let i = 0; i < rounds; i++) {
        const res = await fetch(`${e.url}/api/public/detect`, {
          method: 'POST',
          headers: { 'content-type': 'image/jpeg' },
          body: new Uint8Array(1024),
        });
        expect(res.status).toBe(503);
        expect(((await res.json()) as { code: number }).code).toBe(5001);
        // At once, no waiting: only the direct asks are counted, one each.
        counts.push(await remainingToday());
      }
      console.log(
        `${rounds} detect 503s through the edge, each followed at once by a count: ${counts.join(' ')}`,
      );
      expect(counts).toEqual(counts.map((_, i) => (counts[0] as number) - i));
    }, 60_000);

    it('the gateway killed the instant a 503 leaves it: the charge is taken back all the same', async () => {
      const rounds = 8;
      let lost = 0;
      for (let i = 0; i < rounds; i++) {
        const before = await remainingToday();
        // Half the rounds with a pooled connection to the quota service, half without.
        const e = await edge(i % 2 === 0 ? busy : late);
        const port = Number(new URL(e.url).port);
        // A raw request: the gateway is killed (SIGKILL) from the very callback that sees its answer's
        // first bytes, before the client even parses it.
        const statusLine = await new Promise<string>((resolve, reject) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.write(
              'POST /api/public/detect HTTP/1.1\r\nhost: edge\r\ncontent-type: image/jpeg\r\n' +
                `content-length: 16\r\n\r\n${'x'.repeat(16)}`,
            );
          });
          socket.once('data', (chunk) => {
            process.kill(e.pid, 'SIGKILL');
            socket.destroy();
            resolve(chunk.toString('latin1').split('\r\n')[0] as string);
          });
          socket.once('error', reject);
        });
        expect(statusLine).toBe('HTTP/1.1 503 Service Unavailable');
        await e.stop();
        // One for `before`'s own ask; the 503 must have cost nothing.
        const charged = before - (await remainingToday()) - 1;
        lost += charged;
      }
      console.log(`gateway SIGKILLed as each 503 left it: ${lost} of ${rounds} 503s stayed charged`);
      expect(lost).toBe(0);
    }, 120_000);

    it('the quota store hanging when a 503 is refunded: asked twice, logged, the client still answered', async () => {
      const e = await edge(late);
      const before = await remainingToday();
      const path = '/api/public/detect?refund=hanging-store';
      const sent = fetch(`${e.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg' },
        body: new Uint8Array(1024),
      });
      let status: number;
      try {
        // Charged (ext_authz passed: the stand-in reads the body), then the store hangs until after the
        // stand-in's 503 and both refunds.
        const deadline = Date.now() + 10_000;
        while (!late.reading(path) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        expect(late.reading(path), 'the request reached detect').toBe(true);
        redis.pause();
        const res = await sent;
        status = res.status;
        await res.arrayBuffer();
      } finally {
        redis.resume();
      }
      expect(status).toBe(503);
      const line = e.child
        .output()
        .split('\n')
        .find((l) => l.includes('nsfwdetector: the refund of charge'));
      console.log(`store hung at the refund: client answered ${status}; Envoy logged: ${line?.trim()}`);
      expect(line ?? '(no such line in its log)', 'Envoy logs the refund that failed').toMatch(
        /failed twice \(last status 50[34]\): this 503 may stay charged/,
      );
      // The store back: what the quota service sent it before giving up may have run; either way at most
      // one refund, and the log line names the charge if it stayed.
      let after = Number.NaN;
      for (const until = Date.now() + 10_000; Date.now() < until; ) {
        after = await remainingToday().catch(() => Number.NaN);
        if (!Number.isNaN(after)) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      const charged = before - after - 1;
      console.log(`after the store came back: the 503 charged ${charged} time(s)`);
      expect([0, 1]).toContain(charged);
    }, 60_000);
  },
);
