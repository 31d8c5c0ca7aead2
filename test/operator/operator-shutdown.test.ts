// The operator's SIGTERM, as every process's (lib/common/boot.ts), against a real kube-apiserver +
// etcd and a real redis-server: readiness answers 503 in the error table's envelope while the process
// still serves its metrics, the Lease is released, a request in flight when the signal came is answered
// once the drain is over, and the process exits 0 — with its log lines those of the shared logger. The
// grace timer bounds the whole shutdown: a request its client holds open past the grace ends the
// process in exit 1 at the grace.
// The operator's routes answer at once (its metrics are read from memory, its probes check nothing
// that waits, no route reads a body): the request in flight is a GET whose head the client has not
// finished sending (test/support/held-request.ts), as for the health service.

import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeWithKube } from '../support/describe-kube.ts';
import { eventually } from '../support/eventually.ts';
import { headInFlight } from '../support/held-request.ts';
import { type KubeApiServer, startKubeApiServer } from '../support/kube-apiserver.ts';
import { RedisServer } from '../support/redis-server.ts';
import { ROOT, type ServerProcess, spawnOperator } from '../support/server-process.ts';
import { REDIS_SERVER } from '../support/tools.ts';

describeWithKube(
  'operator shutdown against a real API server and Redis',
  ['kube-apiserver', 'etcd', 'kubectl'],
  () => {
    let kube: KubeApiServer;
    let redis: RedisServer;
    const operators: ServerProcess[] = [];

    const startOperator = async (identity: string, env: Record<string, string>) => {
      const operator = await spawnOperator({
        kubeconfig: kube.kubeconfig,
        redisUrl: redis.url,
        identity,
        waitFor: 'ready',
        startTimeoutMs: 60_000,
        env,
      });
      operators.push(operator);
      return operator;
    };
    const leaseHolder = async () =>
      (
        JSON.parse((await kube.kubectl(['get', 'lease', 'nsfwdetector-operator', '-o', 'json'])).stdout) as {
          spec: { holderIdentity?: string };
        }
      ).spec.holderIdentity;
    const leads = (identity: string) =>
      eventually(`${identity} to hold the Lease`, async () =>
        (await leaseHolder().catch(() => undefined)) === identity ? true : undefined,
      );

    beforeAll(async () => {
      kube = await startKubeApiServer();
      redis = await RedisServer.start();
      await kube.kubectl(['apply', '--server-side', '-f', join(ROOT, 'charts/nsfwdetector/crds')]);
      await kube.kubectl(['wait', '--for=condition=Established', 'crd', '--all', '--timeout=60s']);
    }, 300_000);

    afterAll(async () => {
      for (const p of operators) await p.stop();
      await redis?.stop();
      await kube?.stop();
    }, 120_000);

    it('on SIGTERM: not ready (503/5001) while still serving, the Lease released, the request in flight answered, exit 0', async () => {
      const operator = await startOperator('operator-a', {
        SHUTDOWN_DELAY_MS: '3000',
        SHUTDOWN_GRACE_MS: '20000',
      });
      const ready = await fetch(`${operator.url}/internal/ready`);
      expect(await ready.json()).toEqual({ code: 0, message: 'ok', data: { status: 'ready' } });
      await leads('operator-a');
      const scrape = headInFlight(operator.url, '/metrics');
      // Time for the head to reach the server, so that the request is under way when the signal comes.
      await new Promise((r) => setTimeout(r, 300));

      operator.proc.kill('SIGTERM');
      let readiness: Response;
      for (;;) {
        readiness = await fetch(`${operator.url}/internal/ready`);
        if (readiness.status !== 200) break;
        await readiness.arrayBuffer();
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(readiness.status).toBe(503);
      expect(await readiness.json()).toEqual({ code: 5001, message: 'Draining: shutting down' });
      // Still serving while it drains: a new scrape is answered, and closes its connection.
      const metrics = await fetch(`${operator.url}/metrics`);
      expect(metrics.status).toBe(200);
      expect(metrics.headers.get('connection')).toBe('close');
      expect(await metrics.text()).toMatch(/nsfwdetector_operator_leader\{[^}]*\} 1/);

      // The drain is over once the Lease is released (the step after it); the server is closing, and
      // the process waits for the request that was in flight when the signal came.
      await eventually('the Lease released', async () => ((await leaseHolder()) === '' ? true : undefined));
      expect(operator.proc.exitCode).toBeNull();
      const answer = await scrape.finish();
      expect(answer.status, answer.body).toBe(200);
      expect(answer.connection).toBe('close');
      // Answered after the Lease was released: no longer the leader.
      expect(answer.body).toMatch(/^nsfwdetector_operator_leader\{[^}]*\} 0$/m);

      expect(await operator.exited).toBe(0);
      // The shared logger's lines (pino: a level on each), the shutdown's among them.
      const lines = operator.logLines();
      expect(lines.find((l) => l.msg === 'became leader')).toMatchObject({
        level: 30,
        identity: 'operator-a',
      });
      expect(lines.find((l) => l.msg === 'shutting down')).toMatchObject({ level: 30, reason: 'SIGTERM' });
    }, 120_000);

    it('ends at its grace period, exit 1, when a request outlasts it', async () => {
      // The grace leaves the Lease's release (a renewal under way, then a read and a write of the API
      // server: seconds on a loaded CI machine) room to finish, so that the grace ends only the held request.
      const operator = await startOperator('operator-b', {
        SHUTDOWN_DELAY_MS: '500',
        SHUTDOWN_GRACE_MS: '8000',
      });
      await leads('operator-b');
      // Its client never finishes it: the server's close waits for it until the grace timer ends the process.
      const held = headInFlight(operator.url, '/metrics');
      await new Promise((r) => setTimeout(r, 300));
      operator.proc.kill('SIGTERM');
      expect(await operator.exited).toBe(1);
      // The shutdown went past the drain and the Lease (the steps before the close) to wait on the request.
      expect(await leaseHolder()).toBe('');
      expect(operator.logLines().find((l) => l.msg === 'shutdown grace period exceeded')).toMatchObject({
        level: 50,
        graceMs: 8000,
      });
      // Ended with the process, unanswered.
      expect((await held.answered).status).toBe(0);
    }, 120_000);
  },
  [REDIS_SERVER],
);
