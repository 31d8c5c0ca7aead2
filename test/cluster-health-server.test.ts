// The health service's thin server as a real process (cluster mode): port 0, probes, JSON logs with
// the trace id, Prometheus metrics validated by promtool, SIGTERM → exit 0.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OtlpReceiver } from './support/otlp-receiver.ts';
import { parseSamples, sampleValue } from './support/prometheus-text.ts';
import { scrapeValidated } from './support/promtool.ts';
import { type ServerProcess, startClusterService } from './support/server-process.ts';
import { PROMTOOL, skipWithoutTool } from './support/tools.ts';

let receiver: OtlpReceiver;
let health: ServerProcess;

beforeAll(async () => {
  receiver = await OtlpReceiver.start();
  health = await startClusterService('health', { env: { LOG_LEVEL: 'debug', ...receiver.env() } });
});
afterAll(async () => {
  await health?.stop();
  await receiver?.close();
});

describe('the health server', () => {
  it('refuses to boot on an invalid HEALTH_PORT, naming it', async () => {
    const bad = await startClusterService('health', { env: { HEALTH_PORT: 'eighty' }, waitFor: 'nothing' });
    expect(await bad.exited).toBe(2);
    // The leader has exited; stop() also ends what it started (its group) before the file ends.
    await bad.stop();
    expect(bad.output()).toMatch(/HEALTH_PORT must be an integer/);
  });

  it('binds port 0 and says which port in its listening line', () => {
    expect(health.port).toBeGreaterThan(0);
  });

  it('is live and ready as soon as it listens, and answers spec 4.3', async () => {
    for (const path of ['/internal/live', '/internal/ready', '/api/public/health']) {
      const res = await fetch(`${health.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(((await res.json()) as { code: number }).code, path).toBe(0);
    }
  });

  it('serves the API reference: the whole public document (detect included) and Swagger UI', async () => {
    const document = (await (await fetch(`${health.url}/openapi.json`)).json()) as { paths: object };
    expect(Object.keys(document.paths).slice(0, 3).sort()).toEqual(
      ['/api/open/detect', '/api/public/detect', '/api/public/health'].sort(),
    );
    // The page renders the same document, from assets of this process.
    expect(await (await fetch(`${health.url}/docs/api/json`)).json()).toEqual(document);
    for (const path of ['/docs/api', '/docs/api/static/swagger-ui-bundle.js']) {
      const res = await fetch(`${health.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-security-policy'), path).toContain("script-src 'self'");
    }
  });

  it('logs JSON lines that carry the trace id of the caller', async () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const res = await fetch(`${health.url}/api/public/health`, {
      headers: { traceparent: `00-${traceId}-b7ad6b7169203331-01` },
    });
    expect(res.status).toBe(200);
    await expect
      .poll(() => health.logLines().find((l) => l.msg === 'request' && l.trace_id === traceId))
      .toMatchObject({ route: '/api/public/health', status: 200, code: '0' });
    await expect.poll(() => receiver.trace(traceId).length).toBeGreaterThan(0);
    expect(receiver.trace(traceId)[0]?.service).toBe('nsfwdetector-health');
  });

  it('exposes Prometheus metrics that promtool accepts, with the request series', async (ctx) => {
    skipWithoutTool(ctx, PROMTOOL);
    await fetch(`${health.url}/api/public/health`);
    await fetch(`${health.url}/nope`);
    const samples = parseSamples(await scrapeValidated(health.url));
    const ok = { route: '/api/public/health', method: 'GET', status: '200', code: '0', service: 'health' };
    expect(sampleValue(samples, 'nsfwdetector_http_requests_total', ok)).toBeGreaterThanOrEqual(2);
    expect(
      sampleValue(samples, 'nsfwdetector_http_requests_total', {
        route: 'unmatched',
        status: '404',
        code: '4040',
      }),
    ).toBe(1);
    expect(
      sampleValue(samples, 'nsfwdetector_http_request_duration_seconds_count', {
        route: '/api/public/health',
        status: '200',
      }),
    ).toBeGreaterThanOrEqual(2);
    expect(sampleValue(samples, 'nsfwdetector_process_resident_memory_bytes')).toBeGreaterThan(0);
  });

  it('exits 0 on SIGTERM', async () => {
    expect(await health.stop()).toBe(0);
    expect(health.logLines().some((l) => l.msg === 'shutting down')).toBe(true);
  });
});
