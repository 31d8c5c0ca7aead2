// OpenTelemetry, bootstrapped once per process before the HTTP stack is loaded (the server entry
// imports this module first and everything else dynamically, so the instrumentations can patch).
// Nothing is exported unless OTEL_EXPORTER_OTLP_ENDPOINT is set; without it and without test
// processors the SDK is not started at all and the tracer below is the API's no-op. The SDK and the
// auto-instrumentations are then not even loaded (imported lazily): they cost ~57 MB of RSS and a
// larger heap for every garbage collection.

import { type Attributes, type Span, SpanStatusCode, trace } from '@opentelemetry/api';
import type { NodeSDK } from '@opentelemetry/sdk-node';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { isApiError } from './errors.ts';

let sdk: NodeSDK | undefined;

/** Kubernetes probes and Prometheus scrapes. */
const UNTRACED_PATH = /^\/(?:internal\/(?:live|ready)|metrics)(?:[?/]|$)/;

export interface TelemetryOptions {
  serviceName: string;
  /** Extra processors (tests pass an in-memory exporter here). */
  spanProcessors?: SpanProcessor[];
  env?: Record<string, string | undefined>;
  /** TRACE_SAMPLE_RATIO: share of the traces that start here which are recorded (default 1). */
  sampleRatio?: number;
}

/** Starts the SDK if anything is to be exported; resolves to whether it did. Await before loading HTTP. */
export async function startTelemetry(opts: TelemetryOptions): Promise<boolean> {
  if (sdk) return true;
  const env = opts.env ?? process.env;
  const exporting = Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  if (!exporting && !opts.spanProcessors?.length) return false;
  process.env.OTEL_SERVICE_NAME ??= opts.serviceName;
  const [
    { NodeSDK },
    { getNodeAutoInstrumentations },
    { createAddHookMessageChannel },
    { register },
    { ParentBasedSampler, TraceIdRatioBasedSampler },
  ] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/auto-instrumentations-node'),
    import('import-in-the-middle'),
    import('node:module'),
    import('@opentelemetry/sdk-trace-base'),
  ]);
  if (sdk) return true;
  // Our code and its packages are ES modules, which the instrumentations' require hook never sees
  // (ioredis and fastify would run unpatched: no Redis command span in the trace). The ESM loader hook
  // patches them as they are imported; the message channel limits it to the modules instrumented.
  const { registerOptions, waitForAllMessagesAcknowledged } = createAddHookMessageChannel();
  register('import-in-the-middle/hook.mjs', import.meta.url, registerOptions);
  sdk = new NodeSDK({
    serviceName: opts.serviceName,
    // Parent-based: behind Envoy every request carries the edge's sampling decision, so one ratio
    // (the edge's) decides whole traces; an unsampled request records and exports nothing here.
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(opts.sampleRatio ?? 1) }),
    // Without our own processors the SDK builds the OTLP exporter from the OTEL_* environment.
    ...(opts.spanProcessors?.length ? { spanProcessors: opts.spanProcessors } : {}),
    instrumentations: [
      getNodeAutoInstrumentations({
        // File and socket level spans would drown the request tree in noise.
        '@opentelemetry/instrumentation-fs': { enabled: false },
        // Probes and scrapes (every few seconds, forever) would bury the request traces; untraced,
        // the quota readiness PING is not traced either (no parent span).
        '@opentelemetry/instrumentation-http': {
          ignoreIncomingRequestHook: (request) => UNTRACED_PATH.test(request.url ?? ''),
        },
        '@opentelemetry/instrumentation-dns': { enabled: false },
        '@opentelemetry/instrumentation-net': { enabled: false },
        '@opentelemetry/instrumentation-runtime-node': { enabled: false },
        // Log lines get the trace id from our own mixin (logging.ts), which also works with test
        // processors; this one would add the same keys a second time.
        '@opentelemetry/instrumentation-pino': { enabled: false },
      }),
    ],
  });
  sdk.start();
  await waitForAllMessagesAcknowledged();
  return true;
}

export async function stopTelemetry(): Promise<void> {
  const running = sdk;
  sdk = undefined;
  await running?.shutdown();
}

const tracer = trace.getTracer('nsfwdetector');

/** Runs `fn` inside a child span of the active one; failures mark the span and propagate. */
export async function inSpan<T>(
  name: string,
  attributes: Attributes,
  fn: (span: Span) => Promise<T> | T,
): Promise<T> {
  return tracer.startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      if (isApiError(err)) span.setAttribute('nsfwdetector.error_code', err.code);
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Records a finished child span of the active one for work timed elsewhere (e.g. a worker thread). */
export function recordSpan(
  name: string,
  attributes: Attributes,
  startEpochMs: number,
  durationMs: number,
): void {
  tracer.startSpan(name, { attributes, startTime: startEpochMs }).end(startEpochMs + durationMs);
}
