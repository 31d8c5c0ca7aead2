// The contract through the real cluster topology (`npm run stack`'s startStack): Envoy with the chart's
// configuration, ext_authz to the quota service on a real redis-server, the detect and health servers,
// Jaeger. Then the faults: Redis killed, the quota process killed, detect stopped under load and killed.
// Tests run in order and share one stack; the fault tests come last and restore what they break.

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../lib/common/errors.ts';
import { MAX_REQUEST_HEADER_BYTES } from '../../lib/common/http-limits.ts';
import { admin } from '../../loadtests/run.ts';
import { accountSubject } from '../../services/quota/authorize.ts';
import { RedisLayout } from '../../services/quota/stores/redis-layout.ts';
import { type Stack, startStack } from '../../tools/stack/stack.ts';
import { requireTool } from '../../tools/stack/tools.ts';
import { childEnv } from '../support/children.ts';
import { hostileImage } from '../support/hostile-images.ts';
import {
  type EdgeAnswer,
  expectAnonymousJpegScored,
  get,
  JPEG,
  jaegerTrace,
  multipartJpeg,
  partialUpload,
  post,
  rawRequest,
  rawUpload,
} from '../support/stack-client.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';
import { DAY_MS, WindowLog } from '../support/window-log.ts';

const execFileAsync = promisify(execFile);

// Free: 3 a minute (4290 after); pro: 3 a day (4291 after); anonymous: plenty (counted, never refused).
const LIMITS = {
  ANON_PER_MINUTE: '100000',
  ANON_PER_DAY: '1000000',
  FREE_PER_MINUTE: '3',
  FREE_PER_DAY: '100000',
  PRO_PER_MINUTE: '3',
  PRO_PER_DAY: '3',
  // Low enough that a 16 MP noise JPEG is killed for its cost; a test image takes a few ms.
  DECODE_CPU_LIMIT_MS: '100',
};

const UNAVAILABLE = ERRORS.UNAVAILABLE;

function expectUnavailable(a: EdgeAnswer, what: string): void {
  expect({ status: a.status, code: a.code }, what).toEqual({ status: 503, code: UNAVAILABLE.code });
  expect(a.contentType, what).toMatch(/^application\/json/);
  expect(Number(a.headers.get('retry-after')), `${what}: Retry-After`).toBeGreaterThanOrEqual(1);
}

describeWithStackTools(
  'the cluster stack through Envoy',
  ['helm', 'envoy', 'jaeger', 'promtool'],
  { redis: true },
  () => {
    let stack: Stack;
    let adminEnv: Record<string, string>;
    let edge: string;

    beforeAll(async () => {
      stack = await startStack({ port: 0, env: childEnv({ ...process.env, ...LIMITS, LOG_LEVEL: 'info' }) });
      edge = stack.edgeUrl;
      // The admin CLI's Redis bound (100 ms by default) trips now and then on a busy shared machine.
      adminEnv = { REDIS_URL: stack.redisUrl, REDIS_COMMAND_TIMEOUT_MS: '1000', ...LIMITS };
    }, 300_000);
    afterAll(async () => {
      await stack?.stop();
    }, 60_000);

    async function newKey(tier: 'free' | 'pro'): Promise<string> {
      const email = `e2e-${randomBytes(4).toString('hex')}@example.com`;
      await admin(adminEnv, ['create-account', '--email', email, '--tier', tier]);
      const created = (await admin(adminEnv, ['issue-key', email, '--name', 'e2e'])) as { secret: string };
      return created.secret;
    }

    it('scores an anonymous upload both request ways, with one set of quota headers', async () => {
      for (const answer of [
        await post(edge, '/api/public/detect'),
        await post(edge, '/api/public/detect', { body: multipartJpeg() }),
      ]) {
        expectAnonymousJpegScored(answer, LIMITS.ANON_PER_DAY);
      }
    });

    it('scores on the key endpoint with a key made by the admin CLI on Redis', async () => {
      const secret = await newKey('pro');
      const answer = await post(edge, '/api/open/detect', { headers: { authorization: `Bearer ${secret}` } });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      expect(answer.headers.get('x-quota-tier')).toBe('pro');
      expect(answer.headers.get('x-ratelimit-remaining')).toBe('2');
    });

    it('refuses a bad or missing key with 401/4011 and no quota headers', async () => {
      for (const headers of <Array<Record<string, string>>>[
        { authorization: `Bearer nsk_live_${'0'.repeat(32)}` },
        { authorization: 'Bearer nope' },
        {},
      ]) {
        const answer = await post(edge, '/api/open/detect', { headers });
        expect({ status: answer.status, code: answer.code }).toEqual({ status: 401, code: 4011 });
        expect(answer.contentType).toMatch(/^application\/json/);
        expect(answer.headers.get('x-ratelimit-limit')).toBeNull();
      }
    });

    it('refuses past the minute limit with 429/4290, Retry-After and X-RateLimit-* passing through Envoy', async () => {
      const secret = await newKey('free');
      const headers = { authorization: `Bearer ${secret}` };
      // Calls until one is refused; each held to the window of the minute it was counted in.
      const log = new WindowLog();
      const send = () => post(edge, '/api/open/detect', { headers });
      const refused = await log.untilRefused(
        send,
        (a) => a.status === 200,
        Number(LIMITS.FREE_PER_MINUTE),
        8,
      );
      expect({ status: refused.status, code: refused.code }).toEqual({ status: 429, code: 4290 });
      const retryAfter = Number(refused.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(refused.headers.get('x-ratelimit-limit')).toBe(LIMITS.FREE_PER_DAY);
      const served = log.count('served');
      expect(refused.headers.get('x-ratelimit-remaining')).toBe(String(Number(LIMITS.FREE_PER_DAY) - served));
      expect(refused.headers.get('x-quota-tier')).toBe('free');
      expect(refused.contentType).toMatch(/^application\/json/);
    });

    it('refuses past the daily quota with 429/4291 and Retry-After', async () => {
      const secret = await newKey('pro');
      const headers = { authorization: `Bearer ${secret}` };
      // Calls until one is refused; each held to the window of the UTC day it was counted in.
      const send = () => post(edge, '/api/open/detect', { headers });
      const refused = await new WindowLog(DAY_MS).untilRefused(
        send,
        (a) => a.status === 200,
        Number(LIMITS.PRO_PER_DAY),
        8,
      );
      expect({ status: refused.status, code: refused.code }).toEqual({ status: 429, code: 4291 });
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(refused.headers.get('x-ratelimit-limit')).toBe('3');
    });

    it('answers 400/4003 (from detect, not an Envoy 413) for an upload over 50 MiB, streamed through', async () => {
      // A file of 50 MiB + 1 byte in a multipart body: the body is over 50 MiB by the file and the
      // framing; Envoy streams it (no body limit of its own) and detect answers.
      const big = Buffer.alloc(52_428_800 + 1);
      JPEG.copy(big, 0, 0, 1024);
      const form = new FormData();
      form.append('file', new Blob([big], { type: 'image/jpeg' }), 'big.jpg');
      const answer = await post(edge, '/api/public/detect', { body: form });
      expect({ status: answer.status, code: answer.code }).toEqual({ status: 400, code: 4003 });
      expect(answer.body.message).toMatch(/^File too large/);
    });

    it('answers 400/4003 readably to a client that writes all of a raw upload over 50 MiB before reading', async () => {
      // Envoy streams the body on; detect refuses it from its Content-Length, reads the rest and only
      // then answers (an answer before the request's end would make Envoy reset the client).
      for (const size of [52_428_800 + 1, 60_000_000]) {
        const big = Buffer.alloc(size);
        JPEG.copy(big, 0, 0, 1024);
        const head = `POST /api/public/detect HTTP/1.1\r\nHost: edge\r\nContent-Type: image/jpeg\r\nContent-Length: ${size}\r\n\r\n`;
        const answer = await rawUpload(edge, head, big);
        expect(answer, `${size} bytes`).toMatch(/^HTTP\/1\.1 400 /);
        const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
        expect(body).toEqual({
          code: ERRORS.FILE_TOO_LARGE.code,
          message: expect.stringMatching(/^File too large/),
        });
      }
    });

    it('answers 400/4003 at the edge, without reading it, for a body declared longer than detect would read', async () => {
      // The edge's bound (templates/_derived.tpl): twice the limit plus 1 MiB, detect's own bound on reading a
      // refused body. Only the head and the body's first KiB are sent: the edge answers from the declared
      // length alone (a client writing all of it races the edge's reset of a connection it will not read).
      const declared = 2 * 52_428_800 + 1_048_576 + 1;
      const boundary = 'nsfwdetector-edge-bound';
      const part = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`;
      for (const [contentType, start] of [
        ['image/jpeg', JPEG.subarray(0, 1024)],
        [
          `multipart/form-data; boundary=${boundary}`,
          Buffer.concat([Buffer.from(part), JPEG.subarray(0, 1024)]),
        ],
      ] as const) {
        const head = `POST /api/public/detect HTTP/1.1\r\nHost: edge\r\nContent-Type: ${contentType}\r\nContent-Length: ${declared}\r\n\r\n`;
        const answer = await rawRequest(edge, head + start.toString('latin1'));
        expect(answer, contentType).toMatch(/^HTTP\/1\.1 400 /);
        expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({
          code: ERRORS.FILE_TOO_LARGE.code,
          message: ERRORS.FILE_TOO_LARGE.message,
        });
      }
    });

    it('counts a client that sends its own X-Forwarded-For as itself, and strips client identity headers', async () => {
      const remaining: number[] = [];
      for (const spoof of ['203.0.113.7', '198.51.100.1, 203.0.113.8', '10.0.0.1']) {
        const answer = await post(edge, '/api/public/detect', {
          headers: { 'x-forwarded-for': spoof, 'x-account-id': 'acct_someone', 'x-quota-tier': 'pro' },
        });
        expect(answer.status).toBe(200);
        expect(answer.headers.get('x-quota-tier')).toBe('anonymous');
        remaining.push(Number(answer.headers.get('x-ratelimit-remaining')));
      }
      // One counter for all three: each request took one more from the same client's window.
      expect(remaining[1]).toBe((remaining[0] as number) - 1);
      expect(remaining[2]).toBe((remaining[1] as number) - 1);
    });

    it('refuses identity headers that did not come through the edge (detect called directly)', async () => {
      const direct = await post(stack.serviceUrls.detect, '/api/public/detect', {
        headers: { 'x-account-id': 'acct_someone', 'x-quota-tier': 'pro' },
      });
      expect({ status: direct.status, code: direct.code }).toEqual({ status: 401, code: 4011 });
    });

    it('counts nothing a service would refuse for its framing: headers over the limit are refused at the edge, uncharged', async () => {
      const remaining = async (headers: Record<string, string> = {}) => {
        const answer = await post(edge, '/api/public/detect', { headers });
        expect(answer.status, JSON.stringify(answer.body)).toBe(200);
        return Number(answer.headers.get('x-ratelimit-remaining'));
      };
      const before = await remaining();
      // Over the client limit (16 KiB): Envoy refuses before ext_authz, in the envelope.
      const oversized = await post(edge, '/api/public/detect', {
        headers: { 'x-pad': 'a'.repeat(MAX_REQUEST_HEADER_BYTES + 1024) },
      });
      expect({ status: oversized.status, body: oversized.body }).toEqual({
        status: 431,
        body: { code: ERRORS.HEADERS_TOO_LARGE.code, message: ERRORS.HEADERS_TOO_LARGE.message },
      });
      // Just under it: detect accepts it with what Envoy added, and it is counted once.
      const near = await remaining({ 'x-pad': 'a'.repeat(MAX_REQUEST_HEADER_BYTES - 1024) });
      expect(near).toBe(before - 1);
      // Malformed framing is the client's error (400/4001), not "try again" (503).
      const framing = await rawRequest(
        edge,
        'POST /api/public/detect HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: gzip, chunked, foo\r\n\r\n1\r\nx\r\n0\r\n\r\n',
      );
      expect(framing).toMatch(/^HTTP\/1\.1 400 /);
      expect(framing).toContain(`{"code":${ERRORS.BAD_REQUEST.code},`);
      expect(await remaining()).toBe(before - 2);
    });

    it('charges an image killed for its own cost (400/4005 through Envoy): the edge refunds only 503s', async () => {
      const email = `e2e-costly-${randomBytes(4).toString('hex')}@example.com`;
      const created = (await admin(adminEnv, ['create-account', '--email', email, '--tier', 'pro'])) as {
        account: { id: string };
      };
      const { secret } = (await admin(adminEnv, ['issue-key', email, '--name', 'e2e'])) as { secret: string };
      const costly = await hostileImage('jpeg-noise-16mp');
      const redis = new Redis(stack.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
      try {
        const dayKey = new RedisLayout('nsfwd:').day(accountSubject(created.account.id));
        const counted = async () => Number((await redis.hget(dayKey, 'n')) ?? 0);
        const killed = await post(edge, '/api/open/detect', {
          headers: { authorization: `Bearer ${secret}` },
          body: costly,
        });
        expect({ status: killed.status, code: killed.code }, JSON.stringify(killed.body)).toEqual({
          status: 400,
          code: ERRORS.UNDECODABLE.code,
        });
        // Had it been refunded the count would be back to 0: the edge refunds a 503 before answering it,
        // and the wait covers a refund that came late.
        await new Promise((r) => setTimeout(r, 2_000));
        expect(await counted()).toBe(1);
      } finally {
        redis.disconnect();
      }
    });

    it('answers Envoy-made replies in the envelope: unknown route 404/4040; health and skill bypass the quota', async () => {
      const missing = await get(edge, '/no/such/route');
      expect({ status: missing.status, body: missing.body }).toEqual({
        status: 404,
        body: { code: ERRORS.NOT_FOUND.code, message: ERRORS.NOT_FOUND.message },
      });
      expect(missing.contentType).toBe('application/json');
      const health = await get(edge, '/api/public/health');
      expect(health.status).toBe(200);
      expect(health.body.data.status).toBe('ok');
      expect(health.headers.get('x-ratelimit-limit')).toBeNull();
      expect((await get(edge, '/docs/skill.md')).status).toBe(200);
      expect((await get(edge, '/docs/api')).status).toBe(200);
      // The reference page's assets come from the health service too (Swagger UI's, from the package).
      expect((await get(edge, '/docs/api/static/swagger-ui-bundle.js')).status).toBe(200);
      // The contract published at the edge is the embedded one: detect's routes included.
      const document = await get(edge, '/openapi.json');
      expect(Object.keys(document.body.paths)).toEqual(
        expect.arrayContaining(['/api/public/detect', '/api/open/detect', '/api/public/health']),
      );
      expect((await get(edge, '/console')).status).toBe(200);
    });

    it('keeps the active-keys limit through the edge: 100 concurrent creations leave exactly 20 (one Redis script)', async () => {
      const email = `keys-${randomBytes(4).toString('hex')}@example.com`;
      const json = { 'content-type': 'application/json' };
      const credentials = JSON.stringify({ email, password: 'a stack password' });
      const signup = await fetch(`${edge}/console/api/signup`, {
        method: 'POST',
        headers: json,
        body: credentials,
      });
      expect(signup.status).toBe(202);
      const login = await fetch(`${edge}/console/api/login`, {
        method: 'POST',
        headers: json,
        body: credentials,
      });
      expect(login.status).toBe(200);
      const cookie = login.headers
        .getSetCookie()
        .map((c) => c.split(';')[0])
        .join('; ');
      const csrf = ((await login.json()) as { data: { csrfToken: string } }).data.csrfToken;
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          fetch(`${edge}/console/api/keys`, {
            method: 'POST',
            headers: { ...json, cookie, 'x-csrf-token': csrf },
            body: JSON.stringify({ name: `k${i}` }),
          }).then(async (res) => ({
            status: res.status,
            body: (await res.json()) as { code: number; message?: string },
          })),
        ),
      );
      const counts: Record<string, number> = {};
      for (const a of answers) {
        const what = `${a.status} ${a.body.code}: ${a.body.message ?? ''}`;
        counts[what] = (counts[what] ?? 0) + 1;
      }
      console.log(`100 concurrent key creations through the edge: ${JSON.stringify(counts)}`);
      // Exactly the limit made; every other answer a refusal of the limit or, on a loaded machine, a
      // store that did not answer in time (503/5001: "unknown", the key possibly made but never shown).
      expect(answers.filter((a) => a.status === 201).length).toBeLessThanOrEqual(20);
      for (const a of answers.filter((a) => a.status !== 201))
        expect([a.status, a.body.code]).toSatisfy(
          ([status, code]: number[]) =>
            (status === 400 && code === 4001) || (status === 503 && code === 5001),
        );
      expect(answers.filter((a) => a.status === 400).length).toBeGreaterThanOrEqual(50);
      const listed = await fetch(`${edge}/console/api/keys`, { headers: { cookie } });
      const keys = ((await listed.json()) as { data: { keys: Array<{ revokedAt: string | null }> } }).data
        .keys;
      expect(keys.filter((k) => k.revokedAt === null)).toHaveLength(20);
    });

    it('exposes Prometheus metrics on every service and Envoy stats, valid for promtool check metrics', async () => {
      const promtool = requireTool('promtool');
      const check = async (text: string) => {
        const run = execFileAsync(promtool, ['check', 'metrics']);
        run.child.stdin?.end(text);
        try {
          await run;
          return '';
        } catch (err) {
          return `${(err as { stdout?: string }).stdout ?? ''}${(err as { stderr?: string }).stderr ?? ''}`;
        }
      };
      for (const [name, url] of Object.entries(stack.serviceUrls)) {
        const res = await fetch(`${url}/metrics`);
        expect(res.status, `${name} /metrics`).toBe(200);
        const text = await res.text();
        expect(text, `${name} /metrics`).toMatch(/^# (HELP|TYPE) /m);
        expect(await check(text), `${name}: promtool check metrics`).toBe('');
      }
      // Envoy's exposition has no HELP lines (a lint remark promtool prints); it must parse.
      const envoy = await (await fetch(`${stack.adminUrl}/stats/prometheus`)).text();
      expect(envoy).toMatch(/envoy_cluster_upstream_rq_total\{[^}]*envoy_cluster_name="detect"/);
      expect(await check(envoy)).not.toMatch(/parsing error|error while linting/);
    });

    it('puts Envoy, quota ext_authz with its Redis command, and detect pipeline spans in ONE trace', async () => {
      const traceId = randomBytes(16).toString('hex');
      const callerSpan = randomBytes(8).toString('hex');
      const answer = await post(edge, '/api/public/detect', {
        headers: { traceparent: `00-${traceId}-${callerSpan}-01` },
      });
      expect(answer.status).toBe(200);
      const wanted = (spans: Awaited<ReturnType<typeof jaegerTrace>>) => {
        const services = new Set(spans.map((s) => s.service));
        const ops = new Set(spans.filter((s) => s.service.includes('detect')).map((s) => s.operation));
        const quotaRedis = spans.some(
          (s) =>
            s.service.includes('quota') &&
            (s.tags['db.system'] === 'redis' || s.tags['db.system.name'] === 'redis'),
        );
        return (
          services.has('nsfwdetector-edge') &&
          // Envoy's own spans may reach Jaeger in different flushes: wait for its ingress span too.
          spans.some((s) => s.service === 'nsfwdetector-edge' && s.parentSpanId === callerSpan) &&
          [...services].some((s) => s.includes('quota')) &&
          quotaRedis &&
          ['intake', 'sniff', 'probe', 'decode', 'inference'].every((o) => ops.has(o))
        );
      };
      // Envoy flushes its spans about every 5 s; the services every 0.5 s.
      let spans: Awaited<ReturnType<typeof jaegerTrace>> = [];
      const deadline = Date.now() + 40_000;
      while (Date.now() < deadline) {
        spans = await jaegerTrace(stack.jaegerUrl, traceId);
        if (wanted(spans)) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      const summary = spans.map((s) => `${s.service}:${s.operation}`).sort();
      expect(wanted(spans), `spans of trace ${traceId}: ${summary.join(', ')}`).toBe(true);
      // Envoy continued the caller's trace: its span is the child of the caller's span.
      const edgeSpan = spans.find((s) => s.service === 'nsfwdetector-edge' && s.parentSpanId === callerSpan);
      expect(edgeSpan, 'Envoy span under the caller span').toBeDefined();
      // The access log line of this request carries the trace id.
      await expect
        .poll(() => stack.child('envoy').output().includes(`"trace_id":"${traceId}"`), { timeout: 15_000 })
        .toBe(true);
    });

    it('answers 503/5001 while redis-server is killed, then recovers without a restart', async () => {
      await stack.child('redis').kill();
      const during: EdgeAnswer[] = [];
      for (let i = 0; i < 20; i++) during.push(await post(edge, '/api/public/detect'));
      for (const a of during) expectUnavailable(a, 'Redis down');
      // Latency is printed, not judged (a loaded machine is no clock): an answer at all is the check.
      console.log(`20 answers with Redis down: max ${Math.max(...during.map((a) => a.ms)).toFixed(1)} ms`);
      // The health service never depends on the quota path.
      expect((await get(edge, '/api/public/health')).status).toBe(200);

      await stack.restart('redis');
      const deadline = Date.now() + 15_000;
      let last: EdgeAnswer | undefined;
      while (Date.now() < deadline) {
        last = await post(edge, '/api/public/detect');
        if (last.status === 200) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(last?.status, JSON.stringify(last?.body)).toBe(200);
    });

    it('answers 503/5001 from Envoy itself when the quota process is killed', async () => {
      await stack.child('quota').kill();
      for (let i = 0; i < 5; i++) expectUnavailable(await post(edge, '/api/public/detect'), 'quota killed');
      expect((await get(edge, '/api/public/health')).status).toBe(200);
      await stack.restart('quota');
      expect((await post(edge, '/api/public/detect')).status).toBe(200);
    });

    it('finishes every in-flight upload when detect gets SIGTERM under load, and exits 0', async () => {
      const detect = stack.child('detect');
      const inFlight = Array.from({ length: 6 }, () => partialUpload(edge));
      await Promise.all(inFlight.map((u) => u.started));
      // Every request is admitted and streaming into detect: stop it under them, then finish the bodies.
      await new Promise((r) => setTimeout(r, 300));
      detect.signal('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      for (const u of inFlight) u.finish();
      const answers = await Promise.all(inFlight.map((u) => u.done));
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
      for (const a of answers) expect(JSON.parse(a.body).data.image.format).toBe('jpeg');
      expect(await detect.exited).toBe(0);
      // Gone: Envoy answers for it, in the envelope.
      expectUnavailable(await post(edge, '/api/public/detect'), 'detect stopped');
    });

    it('answers 503/5001 when the detect process is killed mid-upload and while it is gone', async () => {
      await stack.restart('detect');
      expect((await post(edge, '/api/public/detect')).status).toBe(200);
      const upload = partialUpload(edge);
      await upload.started;
      await new Promise((r) => setTimeout(r, 300));
      await stack.child('detect').kill();
      upload.finish();
      const cut = await upload.done;
      expect({ status: cut.status, code: cut.code }).toEqual({ status: 503, code: UNAVAILABLE.code });
      expectUnavailable(await post(edge, '/api/public/detect'), 'detect killed');
    });

    it('does not charge requests detect could not answer: Redis counts exactly the 200s', async () => {
      // detect is gone (killed above): ext_authz counts each request, then the edge answers 503 for
      // detect and posts the charge id back to the quota sidecar.
      const email = `e2e-refund-${randomBytes(4).toString('hex')}@example.com`;
      const created = (await admin(adminEnv, ['create-account', '--email', email, '--tier', 'pro'])) as {
        account: { id: string };
      };
      const { secret } = (await admin(adminEnv, ['issue-key', email, '--name', 'e2e'])) as { secret: string };
      const auth = { authorization: `Bearer ${secret}` };
      const redis = new Redis(stack.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
      try {
        const dayKey = new RedisLayout('nsfwd:').day(accountSubject(created.account.id));
        const counted = async () => Number((await redis.hget(dayKey, 'n')) ?? 0);
        // PRO_PER_DAY is 3: charged 503s would leave no room for the 200 below (429/4291 instead).
        for (let i = 0; i < 3; i++)
          expectUnavailable(await post(edge, '/api/open/detect', { headers: auth }), 'detect gone');
        await expect.poll(counted, { timeout: 15_000 }).toBe(0);

        await stack.restart('detect');
        const ok = await post(edge, '/api/open/detect', { headers: auth });
        expect(ok.status, JSON.stringify(ok.body)).toBe(200);
        expect(ok.headers.get('x-ratelimit-remaining')).toBe('2');
        expect(await counted()).toBe(1);
      } finally {
        redis.disconnect();
      }
    });
  },
);
