// The edge's retries toward detect (charts/nsfwdetector/files/envoy.yaml.tpl; docs/kubernetes-ha.md),
// with the real Envoy running the chart's configuration, the real quota service on a real Redis, and two
// stand-in detect pods: a pod that refuses connections, or is killed (SIGKILL) while it holds a request,
// costs the client nothing — the request is answered 200 by the other pod, and charged exactly once
// (the day count the quota service reports moves by one per request). A body above the retry buffer is
// not retried: its client gets 503/5001, and that 503 is not charged. A pod whose node is lost while a
// request's body is on its way (its port black-holed: no ACK, no RST) has that request reset after the
// chart's tcpUserTimeoutMs and answered by the other pod, as is a request sent on its pooled connection
// before the edge ejects it; a pod that reads slowly and answers late is not cut. A draining pod's
// refusal (marked by detect) is retried on another pod too.

import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../lib/common/errors.ts';
import { DRAINING_HEADER } from '../../services/detect/work-gate.ts';
import { type BlackHole, blackHole, LOOPBACK_BLACK_HOLE } from '../support/black-hole.ts';
import { type EdgeEnvoy, startEdgeEnvoy } from '../support/edge-envoy.ts';
import { startUpstream, type Upstream } from '../support/fake-detect.ts';
import { startEdgeQuota } from '../support/quota-process.ts';
import type { RedisServer } from '../support/redis-server.ts';
import type { ServerProcess } from '../support/server-process.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';
import { skipWithoutTool } from '../support/tools.ts';

const EDGE_SECRET = randomBytes(24).toString('hex');
const DAY_LIMIT = 100_000;

interface Answer {
  status: number;
  body: { code: number; data?: { upstream: string; bytes: number } };
  remaining: number | undefined;
}

/** Half of k6's default request timeout: an answer later than this is a client's connection error. */
const CLIENT_TIMEOUT_MS = 30_000;

async function detect(edge: EdgeEnvoy, bytes = 4096, timeoutMs = CLIENT_TIMEOUT_MS): Promise<Answer> {
  return answerOf(
    await fetch(`${edge.url}/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg' },
      body: new Uint8Array(bytes),
      signal: AbortSignal.timeout(timeoutMs),
    }),
  );
}

/**
 * A detect request whose body the client sends in two parts: its first `head` bytes at once, the rest
 * when `finish` is called.
 */
function uploadInTwoParts(edge: EdgeEnvoy, path: string, head: number, rest: number) {
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  const body = new ReadableStream<Uint8Array>({
    start: (c) => {
      controller = c;
    },
  });
  controller?.enqueue(new Uint8Array(head));
  const answer = fetch(`${edge.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg' },
    body,
    duplex: 'half',
    signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
  } as RequestInit).then(answerOf);
  answer.catch(() => {}); // awaited by `finish`, which rethrows
  return {
    finish: (): Promise<Answer> => {
      controller?.enqueue(new Uint8Array(rest));
      controller?.close();
      return answer;
    },
  };
}

async function answerOf(res: Response): Promise<Answer> {
  const remaining = res.headers.get('x-ratelimit-remaining');
  return {
    status: res.status,
    body: (await res.json()) as Answer['body'],
    remaining: remaining === null ? undefined : Number(remaining),
  };
}

/** The day counts the answers report are one apart, each request taking exactly one. */
function chargedOnceEach(remaining: Array<number | undefined>): void {
  const sorted = remaining.map(Number).sort((x, y) => y - x);
  const steps = sorted.slice(1).map((value, i) => (sorted[i] as number) - value);
  expect(steps, `day counts ${sorted}`).toEqual(steps.map(() => 1));
}

async function eventually(
  what: string,
  probe: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describeWithStackTools(
  'edge retries toward detect (real Envoy, quota, Redis)',
  ['helm', 'envoy'],
  { redis: true },
  () => {
    let redis: RedisServer;
    let quota: ServerProcess;
    const started: Array<{ stop: () => Promise<unknown> }> = [];

    beforeAll(async () => {
      ({ redis, quota } = await startEdgeQuota(DAY_LIMIT));
    }, 120_000);

    afterEach(async () => {
      await Promise.all(started.splice(0).map((s) => s.stop()));
    });

    afterAll(async () => {
      await quota?.stop();
      await redis?.stop();
    });

    async function edgeOver(upstreams: Upstream[], set?: Record<string, number>): Promise<EdgeEnvoy> {
      for (const u of upstreams) started.push({ stop: () => u.child.stop(2_000) });
      const edge = await startEdgeEnvoy({
        quotaPort: quota.port,
        detectPorts: upstreams.map((u) => u.port),
        edgeSecret: EDGE_SECRET,
        set,
      });
      started.push(edge);
      return edge;
    }

    it('a detect pod killed while it holds requests: they are answered by the other pod, each charged once', async () => {
      const doomed = await startUpstream('doomed', { FAKE_DETECT_HANG: '1' });
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([doomed, survivor]);
      // Round robin: about half of these wait on the doomed pod, which never answers.
      const inFlight = Array.from({ length: 6 }, () => detect(edge));
      await eventually('the doomed pod holds a request', () => doomed.received() >= 1);
      await new Promise((r) => setTimeout(r, 200)); // let the others arrive too
      const held = doomed.received();
      await doomed.child.kill(); // SIGKILL to its process group
      const answers = await Promise.all(inFlight);
      expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));
      for (const a of answers) expect(a.body.data?.upstream).toBe('survivor');
      // With one more request (the doomed pod gone, to the survivor): 7 requests, 7 charges.
      const after = await detect(edge);
      chargedOnceEach([...answers, after].map((a) => a.remaining));
      expect(after.remaining).toBe(Math.min(...answers.map((a) => a.remaining as number)) - 1);
      const retried = await edge.stat('cluster.detect.upstream_rq_retry');
      console.log(
        `killed pod: it held ${held} request(s); 6/6 answered 200; Envoy retries ${retried}; 7 charged for 7`,
      );
      expect(retried).toBeGreaterThanOrEqual(held);
    }, 60_000);

    it('a detect pod that refuses connections: its requests go to the other pod, each charged once', async () => {
      const gone = await startUpstream('gone');
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([gone, survivor]);
      const before = await detect(edge);
      await gone.child.kill(); // its port now refuses connections; Envoy's health check has not seen it yet
      const answers = await Promise.all(Array.from({ length: 8 }, () => detect(edge)));
      expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
      for (const a of answers) expect(a.body.data?.upstream).toBe('survivor');
      chargedOnceEach([before, ...answers].map((a) => a.remaining));
      expect(Math.min(...answers.map((a) => a.remaining as number))).toBe((before.remaining as number) - 8);
      const connectFailures = await edge.stat('cluster.detect.upstream_cx_connect_fail');
      const retried = await edge.stat('cluster.detect.upstream_rq_retry');
      console.log(
        `refused pod: 8/8 answered 200; connect failures ${connectFailures}; retries ${retried}; 9 charged for 9`,
      );
      expect(connectFailures).toBeGreaterThanOrEqual(1);
      expect(retried).toBeGreaterThanOrEqual(1);
    }, 60_000);

    it("a draining detect pod's refusals (marked): answered 200 by the other pod, each charged once; with no other pod, 503/5001 without the mark, refunded", async () => {
      const drainingAnswer = {
        FAKE_DETECT_STATUS: '503',
        FAKE_DETECT_HEADERS: JSON.stringify({ [DRAINING_HEADER]: '1', 'retry-after': '1' }),
      };
      const draining = await startUpstream('draining', drainingAnswer);
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([draining, survivor]);
      const answers = await Promise.all(Array.from({ length: 8 }, () => detect(edge)));
      expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
      for (const a of answers) expect(a.body.data?.upstream).toBe('survivor');
      chargedOnceEach(answers.map((a) => a.remaining));
      const refused = draining.received();
      const retried = await edge.stat('cluster.detect.upstream_rq_retry');
      console.log(
        `draining pod: it refused ${refused}; 8/8 answered 200 by the other; Envoy retries ${retried}`,
      );
      expect(refused, 'round robin sent some to the draining pod').toBeGreaterThanOrEqual(1);
      expect(retried).toBeGreaterThanOrEqual(refused);

      // The draining pod alone: its answer reaches the client, unmarked, and is not charged.
      const alone = await edgeOver([await startUpstream('draining alone', drainingAnswer)]);
      const res = await fetch(`${alone.url}/api/public/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg' },
        body: new Uint8Array(4096),
        signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
      });
      expect(res.headers.get(DRAINING_HEADER)).toBeNull();
      const refusal = await answerOf(res);
      expect([refusal.status, refusal.body.code]).toEqual([
        ERRORS.UNAVAILABLE.status,
        ERRORS.UNAVAILABLE.code,
      ]);
      const after = await detect(edge);
      expect(after.status).toBe(200);
      expect(after.remaining, 'the 503 refunded').toBe(
        Math.min(...answers.map((a) => a.remaining as number)) - 1,
      );
    }, 60_000);

    it('a detect pod whose node is lost mid-upload (no ACK, no RST): the request is reset within seconds, answered 200 by the other pod, charged once; the pod is ejected', async (ctx) => {
      skipWithoutTool(ctx, LOOPBACK_BLACK_HOLE);
      const lost = await startUpstream('lost');
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([lost, survivor]);
      const head = 64 * 1024;
      const rest = 256 * 1024; // the whole body fits the retry buffer
      const answers: Answer[] = [await detect(edge)];
      let hole: BlackHole | undefined;
      try {
        let onLost: { answer: Answer; afterMs: number; ejectedAfterMs: number } | undefined;
        // Until an upload is being read by the pod about to be lost (round robin: the first or second).
        for (let i = 0; i < 4 && onLost === undefined; i++) {
          const path = `/api/public/detect?upload=${i}`;
          const upload = uploadInTwoParts(edge, path, head, rest);
          await eventually('a pod reads the upload', () => lost.reading(path) || survivor.reading(path));
          if (!lost.reading(path)) {
            answers.push(await upload.finish());
            continue;
          }
          // The node is lost: the rest of the body leaves Envoy and is never acknowledged.
          hole = blackHole(lost.port);
          const cutAt = Date.now();
          const ejected = eventually(
            'the lost pod out of the balancing',
            async () => (await edge.stat('cluster.detect.membership_healthy')) === 1,
            CLIENT_TIMEOUT_MS,
          ).then(() => Date.now() - cutAt);
          const answer = await upload.finish();
          onLost = { answer, afterMs: Date.now() - cutAt, ejectedAfterMs: await ejected };
        }
        expect(onLost, 'an upload reached the pod about to be lost').toBeDefined();
        const answer = onLost?.answer as Answer;
        answers.push(answer);
        expect(answer.status).toBe(200);
        expect(answer.body.data).toEqual({ upstream: 'survivor', bytes: head + rest });
        const after = await detect(edge);
        expect(after.body.data?.upstream).toBe('survivor');
        chargedOnceEach([...answers, after].map((a) => a.remaining));
        expect(after.remaining).toBe(Math.min(...answers.map((a) => a.remaining as number)) - 1);
        const retried = await edge.stat('cluster.detect.upstream_rq_retry');
        const destroyed = await edge.stat('cluster.detect.upstream_cx_destroy_local_with_active_rq');
        const destroyedRemote = await edge.stat('cluster.detect.upstream_cx_destroy_remote_with_active_rq');
        console.log(
          `lost node mid-upload: 200 from the other pod ${onLost?.afterMs} ms after the black hole; ` +
            `Envoy retries ${retried}, connections lost with a request (local/remote) ${destroyed}/${destroyedRemote}; ` +
            `lost pod out of the balancing ${onLost?.ejectedAfterMs} ms after; ` +
            `${answers.length + 1} charged for ${answers.length + 1}`,
        );
        expect(retried).toBeGreaterThanOrEqual(1);
      } finally {
        hole?.remove();
      }
    }, 90_000);

    it('requests sent to a lost pod before the edge ejects it, on its pooled connection: answered 200 by the other pod, charged once', async (ctx) => {
      skipWithoutTool(ctx, LOOPBACK_BLACK_HOLE);
      const lost = await startUpstream('lost');
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([lost, survivor]);
      // Two requests, one per pod: each pod now has an idle pooled connection from the edge.
      const answers: Answer[] = [await detect(edge), await detect(edge)];
      expect(answers.map((a) => a.body.data?.upstream).sort()).toEqual(['lost', 'survivor']);
      let hole: BlackHole | undefined;
      try {
        hole = blackHole(lost.port);
        const cutAt = Date.now();
        // At once, before any health check has failed: round robin sends one of them to the lost pod,
        // whose whole request then sits unacknowledged on the pooled connection.
        const during = await Promise.all(
          [0, 1].map(async () => {
            const a = await detect(edge).catch((err: unknown) => err as Error);
            return { a, afterMs: Date.now() - cutAt };
          }),
        );
        for (const { a } of during) {
          expect(a, String(a)).not.toBeInstanceOf(Error);
        }
        const got = during.map(({ a }) => a as Answer);
        expect(got.map((a) => a.status)).toEqual([200, 200]);
        for (const a of got) expect(a.body.data?.upstream).toBe('survivor');
        const after = await detect(edge);
        chargedOnceEach([...answers, ...got, after].map((a) => a.remaining));
        const retried = await edge.stat('cluster.detect.upstream_rq_retry');
        console.log(
          `requests sent on a lost pod's pooled connection: 200, 200 after ${during.map((d) => d.afterMs).join(' and ')} ms; ` +
            `Envoy retries ${retried}; ${answers.length + got.length + 1} charged for ${answers.length + got.length + 1}`,
        );
        expect(retried).toBeGreaterThanOrEqual(1);
      } finally {
        hole?.remove();
      }
    }, 90_000);

    it('a detect pod that reads a large upload slowly and answers late is not cut by the unacknowledged-data timeout', async () => {
      const large = 12 * 1024 * 1024; // above the retry buffer: a cut would be a 503
      const rate = 512 * 1024;
      const slow = await startUpstream('slow', {
        FAKE_DETECT_READ_BYTES_PER_S: String(rate),
        FAKE_DETECT_ANSWER_DELAY_MS: '3000',
      });
      // A timeout far below the read's length: its zero-window probes, answered, must keep it alive.
      const edge = await edgeOver([slow], { 'envoy.upstreams.detect.tcpUserTimeoutMs': 1000 });
      const start = Date.now();
      const answer = await detect(edge, large, 80_000);
      const tookMs = Date.now() - start;
      console.log(
        `slow pod (${rate / 1024} KiB/s, answer 3 s after the body) under a 1 s TCP_USER_TIMEOUT: ` +
          `${answer.status} after ${tookMs} ms`,
      );
      expect(answer.status).toBe(200);
      expect(answer.body.data).toEqual({ upstream: 'slow', bytes: large });
      expect(await edge.stat('cluster.detect.upstream_rq_retry')).toBe(0);
    }, 90_000);

    it('a body above the retry buffer is not retried: 503/5001, and not charged', async () => {
      const large = 12 * 1024 * 1024; // above the chart's 4 MiB retry buffer
      const doomed = await startUpstream('doomed', { FAKE_DETECT_HANG_FROM_BYTES: String(large) });
      const survivor = await startUpstream('survivor');
      const edge = await edgeOver([doomed, survivor]);
      const before = await detect(edge);
      expect(before.status).toBe(200);
      // Until one lands on the doomed pod (round robin: the first or the second).
      let answer: Answer | undefined;
      for (let i = 0; i < 4 && answer === undefined; i++) {
        const held = doomed.received();
        const sent = detect(edge, large);
        const onDoomed = await Promise.race([
          sent.then(() => false),
          eventually('the doomed pod read the body', () => doomed.received() > held, 30_000).then(() => true),
        ]);
        if (!onDoomed) {
          expect((await sent).status).toBe(200);
          continue;
        }
        await doomed.child.kill();
        answer = await sent;
      }
      expect(answer, 'a large request reached the doomed pod').toBeDefined();
      expect(answer?.status).toBe(ERRORS.UNAVAILABLE.status);
      expect(answer?.body.code).toBe(ERRORS.UNAVAILABLE.code);
      expect(await edge.stat('cluster.detect.retry_or_shadow_abandoned')).toBeGreaterThanOrEqual(1);
      // The 503 left the edge once its refund was done: the next request's count shows it at once.
      // Every request since `before` but the 503 was charged once.
      const after = await detect(edge);
      expect(after.status).toBe(200);
      const charged = (await edge.stat('cluster.detect.upstream_rq_200')) - 1; // 200s since `before`
      expect((before.remaining as number) - (after.remaining as number), 'the 503 refunded').toBe(charged);
      console.log(
        `12 MiB body on a killed pod: ${answer?.status}/${answer?.body.code}, not retried, refunded`,
      );
    }, 90_000);
  },
);
