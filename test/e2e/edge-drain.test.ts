// A graceful detect deletion under load costs no request (docs/kubernetes-ha.md): the real Envoy on the
// chart's configuration in front of two real detect processes (the model loaded), the real quota service
// on a real Redis, steady traffic through the edge, and one detect sent SIGTERM as the kubelet does.
// detect stops being ready and keeps serving for SHUTDOWN_DELAY_MS, the edge's health checks take it out,
// and what still reaches it after it stops accepting is retried on the other: every answer is 200, each
// charged once. Uploads above the edge's retry buffer (not retryable), streamed across the drain, are
// answered too: the draining pod finishes what it holds.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fixture } from '../fixtures/corpus.ts';
import { type EdgeEnvoy, startEdgeEnvoy } from '../support/edge-envoy.ts';
import { startQuotaServer } from '../support/quota-process.ts';
import { RedisServer } from '../support/redis-server.ts';
import { type ServerProcess, startClusterService } from '../support/server-process.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

const EDGE_SECRET = randomBytes(24).toString('hex');
const IMAGE = readFileSync(fixture('320x240.jpg'));
/** A JPEG padded past the edge's 4 MiB retry buffer (decoders ignore what follows its end marker). */
const LARGE_BYTES = 6 * 1024 * 1024;

/** One large upload sent in 1 MiB chunks over `spreadMs`: in flight while a pod drains. */
async function slowLargeUpload(
  url: string,
  spreadMs: number,
): Promise<{ status: number; remaining: number }> {
  const body = Buffer.alloc(LARGE_BYTES);
  IMAGE.copy(body);
  const chunks = LARGE_BYTES / (1024 * 1024);
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      for (let i = 0; i < chunks; i++) {
        controller.enqueue(body.subarray(i * 1024 * 1024, (i + 1) * 1024 * 1024));
        await new Promise((r) => setTimeout(r, spreadMs / chunks));
      }
      controller.close();
    },
  });
  const res = await fetch(`${url}/api/public/detect`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg', 'content-length': String(LARGE_BYTES) },
    body: stream,
    duplex: 'half',
  } as RequestInit);
  await res.arrayBuffer();
  return { status: res.status, remaining: Number(res.headers.get('x-ratelimit-remaining')) };
}

describeWithStackTools(
  'a graceful detect deletion behind the edge',
  ['helm', 'envoy'],
  { redis: true },
  () => {
    let redis: RedisServer;
    let quota: ServerProcess;
    let detects: ServerProcess[] = [];
    let edge: EdgeEnvoy | undefined;

    beforeAll(async () => {
      redis = await RedisServer.start();
      quota = await startQuotaServer({
        REDIS_URL: redis.url,
        TRUSTED_PROXY_HOPS: '1',
        ANON_PER_MINUTE: '100000',
        ANON_PER_DAY: '100000',
      });
      const env = {
        EDGE_SECRET,
        TRUSTED_PROXY_HOPS: '1',
        SCORING_WORKERS: '1',
        INFERENCE_THREADS: '1',
        SHUTDOWN_DELAY_MS: '3000',
        LOG_LEVEL: 'warn',
      };
      detects = await Promise.all(
        [0, 1].map(() => startClusterService('detect', { env, waitFor: 'ready', startTimeoutMs: 180_000 })),
      );
      edge = await startEdgeEnvoy({
        quotaPort: quota.port,
        detectPorts: detects.map((d) => d.port),
        edgeSecret: EDGE_SECRET,
      });
    }, 300_000);

    afterAll(async () => {
      await edge?.stop();
      await Promise.allSettled(detects.map((d) => d.stop()));
      await quota?.stop();
      await redis?.stop();
    });

    it('answers every request 200 while one detect drains and exits, each charged once', async () => {
      const answers: Array<{ status: number; remaining: number }> = [];
      let sending = true;
      // Four clients, each sending one request after another, through the edge.
      const clients = Array.from({ length: 4 }, async () => {
        while (sending) {
          const res = await fetch(`${edge?.url}/api/public/detect`, {
            method: 'POST',
            headers: { 'content-type': 'image/jpeg' },
            body: IMAGE,
          });
          await res.arrayBuffer();
          answers.push({ status: res.status, remaining: Number(res.headers.get('x-ratelimit-remaining')) });
        }
      });
      await new Promise((r) => setTimeout(r, 2000));
      // Round robin: about half of them on the pod about to leave, still streaming past its drain delay.
      const large = Array.from({ length: 4 }, () => slowLargeUpload(edge?.url as string, 5000));
      await new Promise((r) => setTimeout(r, 200));
      const leaving = detects[0] as ServerProcess;
      // Envoy's requests in flight on that pod as it is told to go (the large uploads among them).
      const clusters = await (await fetch(`${edge?.adminUrl}/clusters`)).text();
      const heldByLeaving = Number(
        clusters.match(new RegExp(`^detect::127\\.0\\.0\\.1:${leaving.port}::rq_active::(\\d+)$`, 'm'))?.[1],
      );
      const before = answers.length;
      const exited = leaving.stop(); // SIGTERM: the kubelet's graceful deletion
      expect(await exited).toBe(0);
      const during = answers.length - before;
      await new Promise((r) => setTimeout(r, 2000)); // and after it is gone
      sending = false;
      await Promise.all(clients);
      const largeAnswers = await Promise.all(large);

      const byStatus: Record<number, number> = {};
      for (const a of answers) byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
      const retried = await edge?.stat('cluster.detect.upstream_rq_retry');
      const unhealthy = await edge?.stat('cluster.detect.health_check.failure');
      console.log(
        `detect SIGTERMed under load: answers ${JSON.stringify(byStatus)} (${during} while it drained and exited); ` +
          `edge retries ${retried}, failed health checks ${unhealthy}; ` +
          `${heldByLeaving} request(s) in flight on it at SIGTERM; ${largeAnswers.length} uploads of ${LARGE_BYTES} bytes streamed across it: ${largeAnswers.map((a) => a.status).join(' ')}`,
      );
      expect(byStatus).toEqual({ 200: answers.length });
      expect(largeAnswers.map((a) => a.status)).toEqual(largeAnswers.map(() => 200));
      expect(heldByLeaving).toBeGreaterThanOrEqual(1);
      expect(during).toBeGreaterThan(0);
      // One charge per request: the day counts the answers carry are all different and consecutive.
      const remaining = [...answers, ...largeAnswers].map((a) => a.remaining).sort((a, b) => b - a);
      expect(new Set(remaining).size).toBe(remaining.length);
      expect((remaining[0] as number) - (remaining.at(-1) as number)).toBe(remaining.length - 1);
    }, 120_000);
  },
);
