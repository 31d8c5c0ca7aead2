// The detect service's own Prometheus series, on its process's registry (lib/common/metrics.ts), fed by
// the decorators its composition root wraps around the work gate and the scorer (metered.ts).

import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Seconds; one decode or inference runs from ~1 ms (small JPEG) to seconds (200 MP JPEG). */
const WORK_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** The detect service's own series. */
export interface DetectMetrics {
  decode: Histogram<'model'>;
  inference: Histogram<'model'>;
  refusals: Counter<'reason'>;
}

export function createDetectMetrics(
  registry: Registry,
  gate: () => { admitted: number; running: number },
): DetectMetrics {
  new Gauge({
    name: 'nsfwdetector_work_admitted',
    help: 'Detect requests holding a work ticket: uploading, waiting for a slot, or being scored.',
    registers: [registry],
    collect() {
      this.set(gate().admitted);
    },
  });
  new Gauge({
    name: 'nsfwdetector_work_running',
    help: 'Images handed to the scoring workers (decoding or inferring) right now.',
    registers: [registry],
    collect() {
      this.set(gate().running);
    },
  });
  return {
    decode: new Histogram({
      name: 'nsfwdetector_decode_duration_seconds',
      help: 'Decoding one image to the model input, in a scoring worker.',
      labelNames: ['model'],
      buckets: WORK_BUCKETS,
      registers: [registry],
    }),
    inference: new Histogram({
      name: 'nsfwdetector_inference_duration_seconds',
      help: 'One ONNX inference, in a scoring worker.',
      labelNames: ['model'],
      buckets: WORK_BUCKETS,
      registers: [registry],
    }),
    refusals: new Counter({
      name: 'nsfwdetector_overload_refusals_total',
      help: 'Detect requests refused 503/5001 by the work gate: busy (in-flight bound reached) or shutting down.',
      labelNames: ['reason'],
      registers: [registry],
    }),
  };
}
