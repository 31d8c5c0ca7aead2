// The detect service on its own (cluster mode, behind Envoy). Listens on DETECT_PORT (default 8082;
// 0 = any free port, printed in the "listening" line). Admission is Envoy's ext_authz call to the
// quota service: detect trusts the identity headers Envoy adds (edge-identity.ts) and counts nothing.
// Ready (/internal/ready) once the model is loaded and every scoring worker has scored a warm-up image.

import { listen, startProcess } from '../../lib/common/boot.ts';
import { loadDetectConfig } from './config.ts';

const config = await startProcess(
  { who: 'nsfwdetector detect', serviceName: 'nsfwdetector-detect' },
  loadDetectConfig,
);

const { createRootApp } = await import('../../lib/common/root-app.ts');
const { policyForApp } = await import('../../lib/policy/policy-in-force.ts');
const { createHttpMetrics, instrumentHttp } = await import('../../lib/common/metrics.ts');
const { createDetectMetrics } = await import('./metrics.ts');
const { installShutdown } = await import('../../lib/common/shutdown.ts');
const { stopTelemetry } = await import('../../lib/common/telemetry.ts');
const { closeConnectionsWhenDraining, drainFirst } = await import('../../lib/common/drain.ts');
const { default: detectApp } = await import('./app.ts');
const { intakeLimitsFrom } = await import('./intake.ts');
const { EdgeAuthorizer, requireEdgeIdentity } = await import('./edge-identity.ts');
const { MeteredGate, MeteredScorer } = await import('./metered.ts');
const { ScorerSlot } = await import('./scoring/scorer-slot.ts');
const { fillScorerSlot } = await import('./scoring/scoring-pool.ts');

const app = createRootApp({ config });
const http = createHttpMetrics('detect');
// The gauges read the gate when scraped, long after it exists.
const metrics = createDetectMetrics(http.registry, () => gate);
const gate = new MeteredGate(config.concurrency, metrics);
const model = new ScorerSlot();
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
const modelName = policy.model() ?? config.model;
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

await listen(app, { port: config.detectPort, host: config.host }, { service: 'detect' });
await fillScorerSlot(
  model,
  { ...config, model: modelName },
  app.log,
  (scorer) => new MeteredScorer(scorer, metrics),
);
