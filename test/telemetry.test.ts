// One request through a real listening server with the SDK bootstrapped as in production, spans
// captured in memory: the pipeline spans hang under the HTTP server span, which continues the
// caller's trace from its `traceparent`.

import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';
import { startTelemetry, stopTelemetry } from '../lib/common/telemetry.ts';
import { fixture } from './fixtures/corpus.ts';
import { FakeClassifier } from './support/fake-classifier.ts';

const exporter = new InMemorySpanExporter();
// Before anything loads the HTTP stack, exactly as services/all-in-one/server.ts does.
await startTelemetry({
  serviceName: 'nsfwdetector-test',
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const { embeddedApp } = await import('./support/embedded-app.ts');

/** A raw HTTP/1.1 request over a socket: no instrumented client rewrites our traceparent. */
function rawPost(port: number, path: string, headers: Record<string, string>, body: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const head = [
      `POST ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      'Connection: close',
      `Content-Length: ${body.length}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ].join('\r\n');
    const chunks: Buffer[] = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', reject);
    socket.write(`${head}\r\n\r\n`);
    // No half-close: the server closes after answering (Connection: close).
    socket.write(body);
  });
}

describe('telemetry', () => {
  let close: (() => Promise<void>) | undefined;
  afterAll(async () => {
    await close?.();
    await stopTelemetry();
  });

  it('puts intake, sniff, probe, decode and inference under the request span of the caller trace', async () => {
    const { app } = await embeddedApp({ classifier: new FakeClassifier() });
    close = () => app.close();
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as { port: number }).port;
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const callerSpanId = '00f067aa0ba902b7';
    const jpeg = readFileSync(fixture('320x240.jpg'));
    const response = await rawPost(
      port,
      '/api/public/detect',
      { 'Content-Type': 'image/jpeg', traceparent: `00-${traceId}-${callerSpanId}-01` },
      jpeg,
    );
    expect(response).toMatch(/^HTTP\/1\.1 200/);

    // The server span ends just after the response is written.
    await expect.poll(() => exporter.getFinishedSpans().some((s) => s.kind === SpanKind.SERVER)).toBe(true);
    const spans = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
    const server = spans.find((s) => s.kind === SpanKind.SERVER);
    expect(server, 'an HTTP server span in the caller trace').toBeDefined();
    expect(server?.parentSpanContext?.spanId).toBe(callerSpanId);

    const byName = new Map(spans.map((s) => [s.name, s]));
    for (const name of ['intake', 'sniff', 'probe', 'decode', 'inference']) {
      const span = byName.get(name);
      expect(span, `span ${name}`).toBeDefined();
      expect(span?.parentSpanContext?.spanId, `${name} is a child of the request span`).toBe(
        server?.spanContext().spanId,
      );
    }
    expect(byName.get('inference')?.attributes).toMatchObject({
      'model.name': 'mobilenet_v2',
      'image.width': 320,
      'image.height': 240,
      'image.bytes': jpeg.length,
    });
    expect(byName.get('decode')?.attributes).toMatchObject({ 'image.width': 320, 'image.height': 240 });
    expect(byName.get('sniff')?.attributes['image.format']).toBe('jpeg');
  });
});
