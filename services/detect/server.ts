// The detect service on its own (cluster mode, behind Envoy). Listens on DETECT_PORT (default 8082;
// 0 = any free port, printed in the "listening" line). Admission is Envoy's ext_authz call to the
// quota service: detect trusts the identity headers Envoy adds (edge-identity.ts) and counts nothing.
// Ready (/internal/ready) once the model is loaded and every scoring worker has scored a warm-up image.

import { loadConfigOrExit } from '../common/config.ts';
import { startTelemetry, stopTelemetry } from '../common/telemetry.ts';

const config = loadConfigOrExit('nsfwdetector detect');
await startTelemetry({ serviceName: 'nsfwdetector-detect', sampleRatio: config.traceSampleRatio });

const { createRootApp } = await import('../common/root-app.ts');
const { policyForApp } = await import('../common/policy-in-force.ts');
const { createDetectMetrics, createHttpMetrics, instrumentHttp } = await import('../common/metrics.ts');
const { installShutdown } = await import('../common/shutdown.ts');
const { closeConnectionsWhenDraining, drainFirst } = await import('../common/drain.ts');
const { default: detectApp } = await import('./app.ts');
const { intakeLimitsFrom } = await import('./intake.ts');
const { EdgeAuthorizer, requireEdgeIdentity } = await import('./edge-identity.ts');
const { MeteredGate, MeteredScorer } = await import('./metered.ts');
const { ModelSlot } = await import('./model/model-slot.ts');
const { jpegDecoderInUse, loadScorer } = await import('./model/load.ts');

const app = createRootApp({ config });
const http = createHttpMetrics('detect');
// The gauges read the gate when scraped, long after it exists.
const metrics = createDetectMetrics(http.registry, () => gate);
const gate = new MeteredGate(config.concurrency, metrics);
const model = new ModelSlot();
instrumentHttp(app, http);
closeConnectionsWhenDraining(app);
requireEdgeIdentity(app, { secret: config.edgeSecret });
// POLICY_FILE (the operator's ConfigMap, mounted): its thresholds and upload limit win over the
// configuration's, from the next request on.
const policy = policyForApp(app, config);
// The model too, but only at boot: one source of truth, the DetectionPolicy's spec.model (its file wins
// over MODEL, which applies only while no valid file is mounted). A model is loaded once per process;
// when spec.model changes the operator rolls this Deployment (pod-template annotation
// nsfwdetector.io/model) and the new pods read the new file here.
const modelName = policy.model();
await app.register(detectApp, {
  model,
  authorizer: new EdgeAuthorizer(),
  gate,
  thresholds: policy.thresholds,
  intake: intakeLimitsFrom(config),
  maxFileBytes: policy.maxFileBytes,
  limits: config.limits,
});

installShutdown({
  log: app.log,
  graceMs: config.shutdownGraceMs,
  // Still serving while the endpoints and Envoy let go of this pod; then new detect requests get
  // 503/5001 from the gate, in-flight ones finish, and the rest closes.
  steps: [
    () => drainFirst(app, config.shutdownDelayMs),
    async () => gate.close(),
    () => app.close(),
    () => model.close(),
    () => stopTelemetry(),
  ],
});

await app.listen({ port: config.detectPort, host: config.host });
app.log.info({ service: 'detect', port: (app.server.address() as { port: number }).port }, 'listening');
try {
  const started = performance.now();
  const scorer = await loadScorer({ ...config, model: modelName }, (err) =>
    app.log.error({ err }, 'scoring worker replaced'),
  );
  model.fill(new MeteredScorer(scorer, metrics));
  const { jpegDecoder, why } = jpegDecoderInUse(config);
  if (why) app.log.warn(why);
  app.log.info(
    {
      model: modelName,
      jpegDecoder,
      ms: Math.round(performance.now() - started),
    },
    'model loaded; ready',
  );
} catch (err) {
  app.log.fatal({ err }, 'model failed to load');
  process.exit(1);
}
