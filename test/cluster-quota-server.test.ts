// The quota service's thin server as a real process on a real redis-server (cluster mode): port 0,
// ready only while Redis answers, decisions and Redis errors in its Prometheus metrics (validated by
// promtool), its ext_authz span and Redis command in the caller's trace, JSON logs with the trace id,
// SIGTERM drain.

import { request } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeRedis } from './support/describe-redis.ts';
import { OtlpReceiver } from './support/otlp-receiver.ts';
import { parseSamples, sampleValue } from './support/prometheus-text.ts';
import { scrapeValidated } from './support/promtool.ts';
import { RedisServer } from './support/redis-server.ts';
import { type ServerProcess, startClusterService, waitForStatus } from './support/server-process.ts';
import { PROMTOOL, skipWithoutTool } from './support/tools.ts';

let redis: RedisServer | undefined;
let receiver: OtlpReceiver | undefined;
let quota: ServerProcess;

const check = (headers: Record<string, string> = {}) =>
  fetch(`${quota.url}/ext_authz/api/public/detect`, { method: 'POST', headers });

describeRedis('the quota server on Redis', () => {
  beforeAll(async () => {
    redis = await RedisServer.start();
    receiver = await OtlpReceiver.start();
    quota = await startClusterService('quota', {
      env: {
        REDIS_URL: redis.url,
        REDIS_KEY_PREFIX: 'qs:',
        // The day refuses (it wins when both are full) whether or not a minute rolls over during the
        // run: Redis TIME is the clock here, and a separate process takes no test clock.
        ANON_PER_MINUTE: '2',
        ANON_PER_DAY: '2',
        LOG_LEVEL: 'debug',
        ...receiver.env(),
      },
    });
  });
  afterAll(async () => {
    await quota?.stop();
    await redis?.stop();
    await receiver?.close();
  });

  it('is live and ready while Redis answers', async () => {
    await waitForStatus(quota, '/internal/ready', 200);
    expect((await fetch(`${quota.url}/internal/live`)).status).toBe(200);
  });

  it('answers ext_authz in the caller trace, with its Redis command and the trace id in its log', async () => {
    const traceId = '5bf92f3577b34da6a3ce929d0e0e4736';
    const res = await check({ traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-account-id')).toBe('-');
    expect(res.headers.get('x-quota-tier')).toBe('anonymous');
    await expect
      .poll(() => quota.logLines().find((l) => l.msg === 'request' && l.trace_id === traceId))
      .toMatchObject({ status: 200, code: 'none' });
    await expect
      .poll(() => receiver?.trace(traceId).some((s) => s.attributes['db.system.name'] === 'redis'))
      .toBe(true);
    const spans = receiver?.trace(traceId) ?? [];
    const server = spans.find((s) => s.kind === 2);
    expect(server?.parentSpanId, 'the server span continues the caller span').toBe('00f067aa0ba902b7');
    expect(server?.service).toBe('nsfwdetector-quota');
    // The readiness probes before it (each one a Redis PING) left no trace.
    const probes = receiver?.spans.filter(
      (s) => s.attributes['url.path'] === '/internal/ready' || s.name === 'ping',
    );
    expect(probes).toEqual([]);
  });

  it('counts decisions by tier and outcome, in metrics promtool accepts', async (ctx) => {
    skipWithoutTool(ctx, PROMTOOL);
    // ANON_PER_DAY=2: the check above was the first; one more is allowed, the next refused.
    expect((await check()).status).toBe(200);
    const refused = await check();
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { code: number }).code).toBe(4291);
    const samples = parseSamples(await scrapeValidated(quota.url));
    const decisions = (outcome: string) =>
      sampleValue(samples, 'nsfwdetector_quota_decisions_total', { tier: 'anonymous', outcome });
    expect(decisions('allowed')).toBe(2);
    expect(decisions('daily_quota')).toBe(1);
    expect(
      sampleValue(samples, 'nsfwdetector_http_requests_total', {
        route: '/ext_authz/*',
        method: 'POST',
        status: '429',
        code: '4291',
        service: 'quota',
      }),
    ).toBe(1);
  });

  it('is unready while Redis is down (503/5001, Redis errors counted) and ready again when it is back', async (ctx) => {
    skipWithoutTool(ctx, PROMTOOL);
    await redis?.kill();
    await waitForStatus(quota, '/internal/ready', 503);
    const ready = await fetch(`${quota.url}/internal/ready`);
    expect(((await ready.json()) as { code: number }).code).toBe(5001);
    expect((await fetch(`${quota.url}/internal/live`)).status).toBe(200);
    expect((await check()).status).toBe(503);
    const samples = parseSamples(await scrapeValidated(quota.url));
    expect(sampleValue(samples, 'nsfwdetector_quota_decisions_total', { outcome: 'unavailable' })).toBe(1);
    expect(sampleValue(samples, 'nsfwdetector_redis_errors_total', { kind: 'command' })).toBe(1);
    // Each failed reconnection attempt is a connection error.
    await expect
      .poll(async () =>
        parseSamples(await scrapeValidated(quota.url))
          .filter((s) => s.name === 'nsfwdetector_redis_errors_total' && s.labels.kind === 'connection')
          .reduce((sum, s) => sum + s.value, 0),
      )
      .toBeGreaterThan(0);

    await redis?.restart();
    await waitForStatus(quota, '/internal/ready', 200);
  });

  it('finishes an in-flight check on SIGTERM and exits 0', async () => {
    let status = 0;
    let body = '';
    // Draining: the last answer on a keep-alive connection closes it, so the server can exit.
    let connection = '';
    const req = request(`${quota.url}/ext_authz/api/public/detect`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', 'content-length': '10' },
    });
    const answered = new Promise<void>((resolve, reject) => {
      req.on('response', (res) => {
        status = res.statusCode ?? 0;
        connection = res.headers.connection ?? '';
        res.on('data', (c) => (body += c));
        res.on('end', resolve);
      });
      req.on('error', reject);
    });
    req.write('12345');
    // The request is in flight (its body half sent) when the signal arrives.
    await new Promise((r) => setTimeout(r, 200));
    quota.proc.kill('SIGTERM');
    await expect.poll(() => quota.logLines().some((l) => l.msg === 'shutting down')).toBe(true);
    req.end('67890');
    await answered;
    expect(status, body).toBe(200);
    expect(connection).toBe('close');
    expect(await quota.exited).toBe(0);
  });
});
