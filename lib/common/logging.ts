// Log lines carry the trace they belong to: a pino mixin reads the active OpenTelemetry span, so a
// line logged while a request is handled names that request's trace (continued from the caller's
// `traceparent` when telemetry runs). Without telemetry there is no active span and nothing is added.

import { isSpanContextValid, trace } from '@opentelemetry/api';

export function traceContextMixin(): Record<string, string> {
  const context = trace.getActiveSpan()?.spanContext();
  if (!context || !isSpanContextValid(context)) return {};
  return { trace_id: context.traceId, span_id: context.spanId };
}
