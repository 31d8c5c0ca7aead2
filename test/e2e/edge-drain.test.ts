// A graceful detect deletion under load costs no request (docs/kubernetes-ha.md): the real Envoy on the
// chart's configuration in front of two real detect processes (the model loaded), the real quota service
// on a real Redis, steady traffic through the edge, and one detect sent SIGTERM as the kubelet does.
// detect stops being ready and keeps serving for SHUTDOWN_DELAY_MS, the edge's health checks take it out,
// and what still reaches it after it stops accepting is retried on the other: every answer is 200, each
// charged once.

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
      const leaving = detects[0] as ServerProcess;
      const before = answers.length;
      const exited = leaving.stop(); // SIGTERM: the kubelet's graceful deletion
      expect(await exited).toBe(0);
      const during = answers.length - before;
      await new Promise((r) => setTimeout(r, 2000)); // and after it is gone
      sending = false;
      await Promise.all(clients);

      const byStatus: Record<number, number> = {};
      for (const a of answers) byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
      const retried = await edge?.stat('cluster.detect.upstream_rq_retry');
      const unhealthy = await edge?.stat('cluster.detect.health_check.failure');
      console.log(
        `detect SIGTERMed under load: answers ${JSON.stringify(byStatus)} (${during} while it drained and exited); ` +
          `edge retries ${retried}, failed health checks ${unhealthy}`,
      );
      expect(byStatus).toEqual({ 200: answers.length });
      expect(during).toBeGreaterThan(0);
      // One charge per request: the day counts the answers carry are all different and consecutive.
      const remaining = answers.map((a) => a.remaining).sort((a, b) => b - a);
      expect(new Set(remaining).size).toBe(remaining.length);
      expect((remaining[0] as number) - (remaining.at(-1) as number)).toBe(remaining.length - 1);
    }, 120_000);
  },
);
