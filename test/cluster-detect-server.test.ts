// The detect service's thin server as a real process (cluster mode, as Envoy reaches it): port 0,
// ready once the model is loaded and the workers warmed, identity only from the edge (headers + the
// shared secret), no X-RateLimit-* of its own, pipeline spans in the caller's trace, JSON logs with the
// trace id, promtool-checked metrics (requests, decode/inference, in-flight work, overload refusals),
// and an in-flight upload that survives SIGTERM.

import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture } from './fixtures/corpus.ts';
import { OtlpReceiver } from './support/otlp-receiver.ts';
import { parseSamples, sampleValue } from './support/prometheus-text.ts';
import { scrapeValidated } from './support/promtool.ts';
import { type ServerProcess, startClusterService, waitForStatus } from './support/server-process.ts';
import { PROMTOOL, skipWithoutTool } from './support/tools.ts';

const SECRET = 'edge-secret-for-the-test-0123456789';
const EDGE = { 'x-edge-secret': SECRET, 'x-account-id': '-', 'x-quota-tier': 'anonymous' };
const jpeg = readFileSync(fixture('320x240.jpg'));

let receiver: OtlpReceiver;
let detect: ServerProcess;

const post = (headers: Record<string, string>) =>
  fetch(`${detect.url}/api/public/detect`, {
    method: 'POST',
    headers: { 'content-type': 'image/jpeg', ...headers },
    body: new Uint8Array(jpeg),
  });

beforeAll(async () => {
  receiver = await OtlpReceiver.start();
  detect = await startClusterService('detect', {
    env: {
      EDGE_SECRET: SECRET,
      LOG_LEVEL: 'debug',
      // One upload in progress at a time: a held upload makes the next request an overload refusal.
      MAX_ACTIVE_IMAGES: '1',
      MAX_UPLOADS: '1',
      SCORING_WORKERS: '1',
      ...receiver.env(),
    },
  });
}, 120_000);
afterAll(async () => {
  await detect?.stop();
  await receiver?.close();
});

describe('the detect server', () => {
  it('refuses to boot on invalid configuration, naming the variable', async () => {
    const bad = await startClusterService('detect', { env: { EDGE_SECRET: 'short' }, waitFor: 'nothing' });
    expect(await bad.exited).toBe(2);
    // The leader has exited; stop() also ends what it started (its group) before the file ends.
    await bad.stop();
    expect(bad.output()).toMatch(/EDGE_SECRET must be at least 16 characters/);
  });

  it('is live at once and ready once the model is loaded and its workers warmed', async () => {
    expect(detect.port).toBeGreaterThan(0);
    expect((await fetch(`${detect.url}/internal/live`)).status).toBe(200);
    await waitForStatus(detect, '/internal/ready', 200);
    // Its stdout is a pipe of its own: the line may arrive after the ready answer.
    await expect.poll(() => detect.logLines().some((l) => l.msg === 'model loaded')).toBe(true);
  });

  it('refuses detect requests that did not come through the edge (401/4011)', async () => {
    const { 'x-edge-secret': _, ...identityOnly } = EDGE;
    for (const headers of [
      {},
      identityOnly,
      { ...EDGE, 'x-edge-secret': `${SECRET}x` },
      { ...EDGE, 'x-quota-tier': 'gold' },
    ]) {
      const res = await post(headers);
      expect(res.status, JSON.stringify(headers)).toBe(401);
      expect(((await res.json()) as { code: number }).code).toBe(4011);
    }
  });

  it('scores an edge-admitted request without quota headers of its own, in the caller trace', async () => {
    const traceId = '6bf92f3577b34da6a3ce929d0e0e4736';
    const res = await post({ ...EDGE, traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { code: number }).code).toBe(0);
    // Envoy adds the quota service's X-RateLimit-*; detect must not add a second set.
    expect([...res.headers.keys()].filter((h) => h.startsWith('x-ratelimit'))).toEqual([]);

    await expect
      .poll(() => detect.logLines().find((l) => l.msg === 'request' && l.trace_id === traceId))
      .toMatchObject({ route: '/api/public/detect', status: 200, code: '0' });
    const names = ['intake', 'sniff', 'probe', 'decode', 'inference'];
    await expect.poll(() => names.every((n) => receiver.trace(traceId).some((s) => s.name === n))).toBe(true);
    const spans = receiver.trace(traceId);
    const server = spans.find((s) => s.kind === 2 && s.parentSpanId === '00f067aa0ba902b7');
    expect(server?.service).toBe('nsfwdetector-detect');
    expect(server?.attributes['nsfwdetector.tier']).toBe('anonymous');
  });

  it('exposes promtool-valid metrics: requests by route, status and code, decode and inference times, work', async (ctx) => {
    skipWithoutTool(ctx, PROMTOOL);
    const samples = parseSamples(await scrapeValidated(detect.url));
    const requests = (status: string, code: string) =>
      sampleValue(samples, 'nsfwdetector_http_requests_total', {
        route: '/api/public/detect',
        method: 'POST',
        status,
        code,
        service: 'detect',
      });
    expect(requests('200', '0')).toBe(1);
    expect(requests('401', '4011')).toBe(4);
    const model = { model: 'mobilenet_v2' };
    expect(sampleValue(samples, 'nsfwdetector_decode_duration_seconds_count', model)).toBe(1);
    expect(sampleValue(samples, 'nsfwdetector_inference_duration_seconds_count', model)).toBe(1);
    expect(sampleValue(samples, 'nsfwdetector_inference_duration_seconds_sum', model)).toBeGreaterThan(0);
    expect(sampleValue(samples, 'nsfwdetector_work_admitted')).toBe(0);
    expect(sampleValue(samples, 'nsfwdetector_work_running')).toBe(0);
  });

  it('counts overload refusals, and finishes an in-flight upload on SIGTERM, exiting 0', async (ctx) => {
    skipWithoutTool(ctx, PROMTOOL);
    // An upload holding the only admission: half its body sent.
    let status = 0;
    let body = '';
    // Draining: the last answer on a keep-alive connection closes it, so the server can exit.
    let connection = '';
    const req = request(`${detect.url}/api/public/detect`, {
      method: 'POST',
      headers: { ...EDGE, 'content-type': 'image/jpeg', 'content-length': String(jpeg.length) },
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
    req.write(jpeg.subarray(0, jpeg.length >> 1));
    await expect
      .poll(async () =>
        sampleValue(parseSamples(await scrapeValidated(detect.url)), 'nsfwdetector_work_admitted'),
      )
      .toBe(1);

    const refused = await post(EDGE);
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { code: number }).code).toBe(5001);
    const samples = parseSamples(await scrapeValidated(detect.url));
    expect(sampleValue(samples, 'nsfwdetector_overload_refusals_total', { reason: 'busy' })).toBe(1);

    detect.proc.kill('SIGTERM');
    await expect.poll(() => detect.logLines().some((l) => l.msg === 'shutting down')).toBe(true);
    req.end(jpeg.subarray(jpeg.length >> 1));
    await answered;
    expect(status, body).toBe(200);
    expect(connection).toBe('close');
    expect((JSON.parse(body) as { code: number }).code).toBe(0);
    expect(await detect.exited).toBe(0);
  });
});
