// The Helm chart against a real Kubernetes API server (test/support/kube-apiserver.ts): lint, the
// rendered objects of several value sets accepted by the server (dry-run), a real install into a
// namespace enforcing the Pod Security "restricted" profile with no warning, an upgrade that keeps the
// generated Redis password, an uninstall that leaves nothing, the schema's refusals, and the Envoy
// configuration the pods mount byte-for-byte the one `npm run stack` runs.
// No kubelet runs here: pods are never started, so nothing waits for readiness (never --wait).

import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadUploadConfig } from '../../services/detect/config.ts';
import { LOCAL_FILTER_VALUES, LOCAL_VALUES, renderEnvoyConfigText } from '../../tools/stack/render-envoy.ts';
import { describeWithKube } from '../support/describe-kube.ts';
import { type KubeApiServer, startKubeApiServer } from '../support/kube-apiserver.ts';
import { startServer } from '../support/server-process.ts';
import { CHART_DIR, helm, helmOk, type Manifest, removeHelmHome, sets } from './helm.ts';

const RESTRICTED_LABELS = [
  'pod-security.kubernetes.io/enforce=restricted',
  'pod-security.kubernetes.io/warn=restricted',
];

/** The value sets every rendering must pass the server with. */
const VALUE_SETS: Record<string, Record<string, string | number | boolean>> = {
  defaults: {},
  'external Redis': {
    'redis.enabled': false,
    'redis.external.url': 'redis://redis.example.internal:6379/0',
    'redis.existingSecret': 'shared-redis',
    'redis.existingSecretKey': 'password',
  },
  'external Sentinel': {
    'redis.enabled': false,
    'redis.external.sentinel.addresses':
      '{sentinel-0.redis.example.internal:26379,sentinel-1.redis.example.internal:26379}',
    'redis.external.sentinel.masterName': 'quota',
    'redis.external.sentinel.existingSecret': 'sentinel-auth',
    'redis.existingSecret': 'shared-redis',
    'operator.enabled': true,
  },
  'external Cluster': {
    'redis.enabled': false,
    'redis.external.cluster.nodes': '{redis-0.example.internal:6379,redis-1.example.internal:6379}',
    'redis.external.waitReplicas': 0,
    'redis.existingSecret': 'shared-redis',
    'operator.enabled': true,
  },
  'in-chart Sentinel': { 'redis.architecture': 'sentinel', 'operator.enabled': true },
  'operator off': { 'operator.enabled': false },
  'operator on': { 'operator.enabled': true },
  'ingress on': {
    'ingress.enabled': true,
    'ingress.className': 'nginx',
    'ingress.tlsSecretName': 'nsfwdetector-tls',
  },
  'no autoscaling, no policies': {
    'detect.autoscaling.enabled': false,
    'detect.podDisruptionBudget.enabled': false,
    'networkPolicy.enabled': false,
    'grafanaDashboard.enabled': false,
  },
};

describeWithKube('Helm chart against a real kube-apiserver', ['kube-apiserver', 'etcd', 'kubectl'], () => {
  let kube: KubeApiServer;
  let namespaceCount = 0;

  /** A fresh namespace enforcing (and warning on) the restricted Pod Security profile. */
  async function restrictedNamespace(): Promise<string> {
    const ns = `chart-${++namespaceCount}`;
    await kube.kubectl(['create', 'namespace', ns]);
    await kube.kubectl(['label', 'namespace', ns, ...RESTRICTED_LABELS]);
    return ns;
  }

  /**
   * A dry-run creates nothing, yet a Pod (the helm test hook) is admitted only if its ServiceAccount
   * exists: the chart's ServiceAccount is created for real first.
   */
  async function withServiceAccount(
    ns: string,
    values: Record<string, string | number | boolean>,
    extra: string[] = [],
  ) {
    const sa = await helmOk([
      'template',
      'nsfwdetector',
      CHART_DIR,
      '--show-only',
      'templates/serviceaccount.yaml',
      ...sets(values),
      ...extra,
    ]);
    await kube.kubectl(['apply', '--namespace', ns, '-f', '-'], { input: sa.stdout });
  }

  /** Server-side dry-run apply of manifests; the objects as the server admitted them, and its warnings. */
  async function serverDryRun(ns: string, manifests: string): Promise<{ items: Manifest[]; stderr: string }> {
    const { stdout, stderr } = await kube.kubectl(
      ['apply', '--dry-run=server', '--namespace', ns, '-o', 'json', '-f', '-'],
      { input: manifests },
    );
    const parsed = JSON.parse(stdout) as { kind: string; items?: Manifest[] } & Manifest;
    return { items: parsed.kind === 'List' ? (parsed.items ?? []) : [parsed], stderr };
  }

  async function template(values: Record<string, string | number | boolean>, extra: string[] = []) {
    return (await helmOk(['template', 'nsfwdetector', CHART_DIR, ...sets(values), ...extra])).stdout;
  }

  beforeAll(async () => {
    kube = await startKubeApiServer();
  }, 180_000);

  afterAll(async () => {
    await kube?.stop();
    removeHelmHome();
  });

  it('passes helm lint --strict, with the default and the local stack values', async () => {
    await helmOk(['lint', '--strict', CHART_DIR]);
    await helmOk(['lint', '--strict', CHART_DIR, '--values', LOCAL_VALUES]);
  });

  for (const [name, values] of Object.entries(VALUE_SETS)) {
    it(`renders objects the API server accepts (${name}), with no Pod Security warning`, async () => {
      const ns = await restrictedNamespace();
      await withServiceAccount(ns, values);
      const { items, stderr } = await serverDryRun(ns, await template(values));
      expect(items.map((o) => o.kind)).toContain('Pod'); // the helm test hook, admitted too
      expect(stderr).not.toMatch(/warning/i);
      expect(items.length).toBeGreaterThan(5);
      const kinds = items.map((o) => o.kind);
      if (name === 'external Redis') {
        expect(kinds).not.toContain('StatefulSet');
        const quota = container(find(items, 'Deployment', 'nsfwdetector-gateway'), 'quota');
        expect(env(quota, 'REDIS_URL')).toBe('redis://:$(REDIS_PASSWORD)@redis.example.internal:6379/0');
        expect(
          quota.env.find((e: { name: string }) => e.name === 'REDIS_PASSWORD').valueFrom.secretKeyRef,
        ).toEqual({
          name: 'shared-redis',
          key: 'password',
        });
      }
      if (name === 'external Sentinel' || name === 'external Cluster') {
        expect(kinds).not.toContain('StatefulSet');
        for (const c of [
          container(find(items, 'Deployment', 'nsfwdetector-gateway'), 'quota'),
          container(find(items, 'Deployment', 'nsfwdetector-operator'), 'operator'),
        ]) {
          expect(env(c, 'REDIS_URL')).toBeUndefined();
          expect(
            c.env.find((e: { name: string }) => e.name === 'REDIS_PASSWORD').valueFrom.secretKeyRef,
          ).toEqual({
            name: 'shared-redis',
            key: 'redis-password',
          });
          if (name === 'external Sentinel') {
            expect(env(c, 'REDIS_SENTINELS')).toBe(
              'sentinel-0.redis.example.internal:26379,sentinel-1.redis.example.internal:26379',
            );
            expect(env(c, 'REDIS_SENTINEL_MASTER')).toBe('quota');
            expect(
              c.env.find((e: { name: string }) => e.name === 'REDIS_SENTINEL_PASSWORD').valueFrom
                .secretKeyRef,
            ).toEqual({ name: 'sentinel-auth', key: 'sentinel-password' });
          } else {
            expect(env(c, 'REDIS_CLUSTER_NODES')).toBe(
              'redis-0.example.internal:6379,redis-1.example.internal:6379',
            );
            expect(env(c, 'REDIS_WAIT_REPLICAS')).toBe('0');
          }
        }
      }
      if (name === 'in-chart Sentinel') {
        // 3 pods, each a data node and a sentinel, spread over nodes, a volume each; the pods and the
        // services find each other by the ClusterIP of each pod's own Service, no DNS name
        // (test/chart/redis-sentinel.test.ts runs the same script on real redis-server processes).
        const redis = find(items, 'StatefulSet', 'nsfwdetector-redis');
        expect(redis.spec.replicas).toBe(3);
        expect(redis.spec.serviceName).toBe('nsfwdetector-redis-nodes');
        expect(redis.spec.volumeClaimTemplates[0].metadata.name).toBe('data');
        const pod = redis.spec.template.spec;
        expect(pod.topologySpreadConstraints[0].topologyKey).toBe('kubernetes.io/hostname');
        expect(pod.containers.map((c: { name: string }) => c.name)).toEqual(['redis', 'sentinel']);
        // A primary being stopped hands over first (redis-sentinel.test.ts runs the handover).
        expect(container(redis, 'redis').lifecycle.preStop.exec.command).toEqual([
          'sh',
          '/scripts/redis-node.sh',
          'handover',
        ]);
        const script = find(items, 'ConfigMap', 'nsfwdetector-redis-node').data?.['redis-node.sh'];
        expect(script).toBe(readFileSync(join(CHART_DIR, 'files', 'redis-node.sh'), 'utf8'));
        const nodes = (env(container(redis, 'sentinel'), 'NODES') ?? '').split(' ');
        // The kubelet expands the Service links of the pods' own Services (made before the pods).
        const serviceHost = (i: number) => `$(NSFWDETECTOR_REDIS_${i}_SERVICE_HOST)`;
        expect(nodes).toEqual([0, 1, 2].map((i) => `${serviceHost(i)}:6379:26379`));
        for (const i of [0, 1, 2]) {
          const own = find(items, 'Service', `nsfwdetector-redis-${i}`);
          expect(own.spec.type).toBe('ClusterIP');
          expect(own.spec.publishNotReadyAddresses).toBe(true);
          expect(own.spec.selector['statefulset.kubernetes.io/pod-name']).toBe(`nsfwdetector-redis-${i}`);
          expect(own.spec.ports.map((p: { port: number }) => p.port)).toEqual([6379, 26379]);
        }
        expect(find(items, 'PodDisruptionBudget', 'nsfwdetector-redis').spec.maxUnavailable).toBe(1);
        const headless = find(items, 'Service', 'nsfwdetector-redis-nodes');
        expect(headless.spec.clusterIP).toBe('None');
        expect(headless.spec.publishNotReadyAddresses).toBe(true);
        expect(items.some((o) => o.kind === 'Service' && o.metadata.name === 'nsfwdetector-redis')).toBe(
          false,
        );
        for (const c of [
          container(find(items, 'Deployment', 'nsfwdetector-gateway'), 'quota'),
          container(find(items, 'Deployment', 'nsfwdetector-operator'), 'operator'),
        ]) {
          expect(env(c, 'REDIS_URL')).toBeUndefined();
          expect(env(c, 'REDIS_SENTINELS')).toBe([0, 1, 2].map((i) => `[${serviceHost(i)}]:26379`).join(','));
          expect(env(c, 'REDIS_SENTINEL_MASTER')).toBe('nsfwdetector');
          for (const v of ['REDIS_PASSWORD', 'REDIS_SENTINEL_PASSWORD'])
            expect(c.env.find((e: { name: string }) => e.name === v).valueFrom.secretKeyRef).toEqual({
              name: 'nsfwdetector-redis',
              key: 'redis-password',
            });
        }
        const policy = find(items, 'NetworkPolicy', 'nsfwdetector-redis-from-quota');
        const ports = policy.spec.ingress.map((r: { ports: { port: number }[] }) =>
          r.ports.map((p) => p.port),
        );
        expect(ports).toEqual([
          [6379, 26379],
          [6379, 26379],
        ]);
      }
      if (name === 'operator on') {
        expect(kinds).toEqual(expect.arrayContaining(['Role', 'RoleBinding']));
        find(items, 'Deployment', 'nsfwdetector-operator');
      }
      if (name === 'defaults') {
        const dashboard = JSON.parse(
          find(items, 'ConfigMap', 'nsfwdetector-dashboard').data?.['nsfwdetector.json'] ?? '',
        );
        const exprs = JSON.stringify(dashboard.panels);
        for (const metric of [
          'nsfwdetector_http_requests_total',
          'nsfwdetector_http_request_duration_seconds_bucket',
          'nsfwdetector_inference_duration_seconds_bucket',
          'nsfwdetector_quota_decisions_total',
        ]) {
          expect(exprs).toContain(metric);
        }
      }
      if (name === 'defaults') {
        // High availability (docs/kubernetes-ha.md): every stateless pod spread over nodes, moved within
        // seconds off a lost node, and kept through a drain by a budget.
        for (const component of ['detect', 'gateway', 'health']) {
          const pod = find(items, 'Deployment', `nsfwdetector-${component}`).spec.template.spec;
          const spread = pod.topologySpreadConstraints[0];
          expect(spread).toMatchObject({
            maxSkew: 1,
            topologyKey: 'kubernetes.io/hostname',
            nodeTaintsPolicy: 'Honor',
          });
          expect(spread.labelSelector.matchLabels['app.kubernetes.io/component']).toBe(component);
          const anti = pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0];
          expect(anti.podAffinityTerm.topologyKey).toBe('kubernetes.io/hostname');
          expect(anti.podAffinityTerm.labelSelector.matchLabels['app.kubernetes.io/component']).toBe(
            component,
          );
          const tolerations = Object.fromEntries(
            pod.tolerations.map((t: { key: string; tolerationSeconds: number; effect: string }) => [
              t.key,
              [t.effect, t.tolerationSeconds],
            ]),
          );
          expect(tolerations).toEqual({
            'node.kubernetes.io/not-ready': ['NoExecute', 10],
            'node.kubernetes.io/unreachable': ['NoExecute', 10],
          });
        }
        for (const component of ['detect', 'gateway']) {
          const pdb = find(items, 'PodDisruptionBudget', `nsfwdetector-${component}`);
          expect(pdb.spec.minAvailable).toBe(1);
          expect(pdb.spec.selector.matchLabels['app.kubernetes.io/component']).toBe(component);
        }
        // Envoy dials detect's headless twin: one address per ready pod.
        const pods = find(items, 'Service', 'nsfwdetector-detect-pods');
        expect(pods.spec.clusterIP).toBe('None');
        expect(pods.spec.publishNotReadyAddresses ?? false).toBe(false);
        expect(pods.spec.selector['app.kubernetes.io/component']).toBe('detect');
        expect(find(items, 'ConfigMap', 'nsfwdetector-envoy').data?.['envoy.yaml']).toContain(
          '"address": "nsfwdetector-detect-pods"',
        );
        // A leaving detect pod keeps serving (SHUTDOWN_DELAY_MS, not ready) longer than the edge takes
        // to stop sending it requests (its health checks fail, or it leaves the Service's addresses),
        // and the grace period covers its whole drain.
        const detect = find(items, 'Deployment', 'nsfwdetector-detect').spec.template.spec;
        const delayMs = Number(
          env(container(find(items, 'Deployment', 'nsfwdetector-detect'), 'detect'), 'SHUTDOWN_DELAY_MS'),
        );
        const graceMs = Number(
          env(container(find(items, 'Deployment', 'nsfwdetector-detect'), 'detect'), 'SHUTDOWN_GRACE_MS'),
        );
        const envoy = JSON.parse(find(items, 'ConfigMap', 'nsfwdetector-envoy').data?.['envoy.yaml'] ?? '');
        const cluster = envoy.static_resources.clusters.find((c: { name: string }) => c.name === 'detect');
        const seconds = (d: string) => Number.parseFloat(d);
        const check = cluster.health_checks[0];
        // Its health checks see /internal/ready answer 503 (the earlier way out; the DNS answer without
        // it comes later, after CoreDNS's 5 s cache and Envoy's next lookup).
        const edgeStopsSendingMs =
          1000 * (seconds(check.interval) * check.unhealthy_threshold + seconds(check.timeout));
        expect(delayMs).toBeGreaterThan(edgeStopsSendingMs);
        expect(detect.terminationGracePeriodSeconds * 1000).toBeGreaterThan(graceMs);
        // A rollout stops an old pod only once every Envoy has the new one among its hosts: CoreDNS's
        // 5 s answer, then the cluster's next lookup. Else a one-pod release's edge may hold only the
        // draining pod once its delay is over, and its requests have no other pod to be retried on.
        const edgeSeesNewPodMs = 5000 + 1000 * seconds(cluster.cluster_type.typed_config.dns_refresh_rate);
        expect(find(items, 'Deployment', 'nsfwdetector-detect').spec.minReadySeconds * 1000).toBeGreaterThan(
          edgeSeesNewPodMs,
        );
        // The gateway's Envoy stays up (preStop) past its drain, within the grace period.
        const gateway = find(items, 'Deployment', 'nsfwdetector-gateway').spec.template.spec;
        const envoyContainer = gateway.containers.find((c: { name: string }) => c.name === 'envoy');
        const drainSeconds = Number(envoyContainer.args[envoyContainer.args.indexOf('--drain-time-s') + 1]);
        expect(envoyContainer.lifecycle.preStop.sleep.seconds).toBeGreaterThan(drainSeconds);
        expect(envoyContainer.lifecycle.preStop.sleep.seconds).toBeLessThan(
          gateway.terminationGracePeriodSeconds,
        );
      }
      if (name === 'operator off' || name === 'defaults') {
        expect(items.some((o) => o.metadata.name.endsWith('-operator'))).toBe(false);
        expect(kinds).not.toContain('CustomResourceDefinition');
      }
      if (name === 'ingress on') {
        const ingress = find(items, 'Ingress', 'nsfwdetector');
        expect(ingress.spec.rules[0].http.paths[0].backend.service.name).toBe('nsfwdetector-gateway');
        expect(ingress.spec.tls[0].secretName).toBe('nsfwdetector-tls');
      }
      if (name === 'no autoscaling, no policies') {
        expect(kinds).not.toContain('HorizontalPodAutoscaler');
        expect(kinds).not.toContain('NetworkPolicy');
        expect(find(items, 'Deployment', 'nsfwdetector-detect').spec.replicas).toBe(2);
      }
    });
  }

  it('renders the optional HTTPRoute and ServiceMonitor (their CRDs are not on this server)', async () => {
    const out = await template({
      'httpRoute.enabled': true,
      'httpRoute.parentRefs[0].name': 'shared',
      'httpRoute.hostnames[0]': 'nsfw.example.com',
      'serviceMonitor.enabled': true,
    });
    expect(out).toContain('kind: HTTPRoute');
    expect(out).toMatch(/kind: HTTPRoute[\s\S]*backendRefs:\n\s+- name: nsfwdetector-gateway\n\s+port: 80/);
    expect(out).toContain('kind: ServiceMonitor');
    // Without a Gateway to attach to, the route is refused at render time with a clear message.
    const refused = await helm(['template', 'x', CHART_DIR, ...sets({ 'httpRoute.enabled': true })]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('httpRoute.parentRefs: name at least one Gateway');
  });

  it("gives the services the edge's trace sampling ratio when they export traces", async () => {
    const out = await template({
      'config.otlpEndpoint': 'http://collector:4318',
      'envoy.tracing.samplingPercent': 10,
    });
    // detect, health and the quota sidecar: each exports to the collector at Envoy's ratio.
    expect(
      out.match(/- \{ name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http:\/\/collector:4318" \}/g),
    ).toHaveLength(3);
    expect(out.match(/- \{ name: TRACE_SAMPLE_RATIO, value: "0.1" \}/g)).toHaveLength(3);
    expect(await template({})).not.toContain('TRACE_SAMPLE_RATIO');
  });

  it("sets detect's decode memory budget from its container's memory limit, which leaves one", async () => {
    const out = await template({});
    expect(out).toMatch(
      /- name: CONTAINER_MEMORY_LIMIT_BYTES\n\s+valueFrom: \{ resourceFieldRef: \{ containerName: detect, resource: limits.memory \} \}/,
    );
    // What the kubelet passes for the default limit: the process accepts it and decodes within it.
    const limit = /detect:[\s\S]*?limits: \{ cpu: "2", memory: (\d+)Mi \}/.exec(
      readFileSync(join(CHART_DIR, 'values.yaml'), 'utf8'),
    )?.[1];
    const bytes = Number(limit) * 1024 * 1024;
    const { concurrency } = loadUploadConfig({ CONTAINER_MEMORY_LIMIT_BYTES: String(bytes) });
    expect(concurrency.decodeBytes).toBeGreaterThanOrEqual(512 * 1024 * 1024);
    expect(concurrency.decodeBytes + concurrency.uploadBytes).toBeLessThan(bytes);
    expect(() => loadUploadConfig({ CONTAINER_MEMORY_LIMIT_BYTES: String(512 * 1024 * 1024) })).toThrow(
      /CONTAINER_MEMORY_LIMIT_BYTES \(536870912\) leaves 0 bytes for decoding/,
    );
  });

  it('warns on a pod template that breaks the restricted profile (the no-warning checks can fail)', async () => {
    const ns = await restrictedNamespace();
    const privileged = `apiVersion: apps/v1
kind: Deployment
metadata: { name: privileged }
spec:
  selector: { matchLabels: { app: p } }
  template:
    metadata: { labels: { app: p } }
    spec:
      containers: [{ name: p, image: busybox }]
`;
    const { stderr } = await serverDryRun(ns, privileged);
    expect(stderr).toMatch(/Warning: would violate PodSecurity "restricted:latest"/);
  });

  it('installs with default values: every object created, restricted profile, no warning; upgrade keeps the Redis password; uninstall leaves nothing', async () => {
    const ns = await restrictedNamespace();
    const kubeconfig = kube.kubeconfig;
    const install = await helmOk(['install', 'nsfwdetector', CHART_DIR, '--namespace', ns], { kubeconfig });
    expect(install.stderr).not.toMatch(/warning/i);
    expect(install.stdout).toContain('STATUS: deployed');
    expect(install.stdout).toContain('port-forward service/nsfwdetector-gateway 8080:80');

    // Every object of the release's manifest exists on the server.
    const manifest = (await helmOk(['get', 'manifest', 'nsfwdetector', '--namespace', ns], { kubeconfig }))
      .stdout;
    const { items: expected } = await serverDryRun(ns, manifest);
    const { stdout } = await kube.kubectl([
      'get',
      'deployments,statefulsets,services,configmaps,secrets,networkpolicies,hpa,pdb,serviceaccounts',
      '--namespace',
      ns,
      '-l',
      'app.kubernetes.io/instance=nsfwdetector',
      '-o',
      'json',
    ]);
    const live = (JSON.parse(stdout) as { items: Manifest[] }).items;
    const names = (list: Manifest[]) => list.map((o) => `${o.kind}/${o.metadata.name}`).sort();
    expect(names(live)).toEqual(names(expected));
    expect(names(live)).toEqual(
      expect.arrayContaining([
        'Deployment/nsfwdetector-gateway',
        'Deployment/nsfwdetector-detect',
        'Deployment/nsfwdetector-health',
        'StatefulSet/nsfwdetector-redis',
        'HorizontalPodAutoscaler/nsfwdetector-detect',
        'PodDisruptionBudget/nsfwdetector-detect',
        'Secret/nsfwdetector-redis',
        'Secret/nsfwdetector-edge',
        'NetworkPolicy/nsfwdetector-default-deny',
        'NetworkPolicy/nsfwdetector-redis-from-quota',
        'NetworkPolicy/nsfwdetector-detect-from-gateway',
        'NetworkPolicy/nsfwdetector-health-from-gateway',
        'Service/nsfwdetector-detect',
        'Service/nsfwdetector-health',
        'Service/nsfwdetector-gateway',
        'Service/nsfwdetector-redis',
        'ConfigMap/nsfwdetector-envoy',
      ]),
    );

    // The gateway: Envoy with the quota sidecar, on the release's Envoy ConfigMap.
    const gateway = find(live, 'Deployment', 'nsfwdetector-gateway');
    const pod = gateway.spec.template.spec;
    expect(pod.containers.map((c: { name: string }) => c.name)).toEqual(['envoy', 'quota']);
    expect(pod.volumes.find((v: { name: string }) => v.name === 'envoy-config').configMap.name).toBe(
      'nsfwdetector-envoy',
    );
    expect(container(gateway, 'envoy').args.slice(0, 2)).toEqual(['-c', '/etc/envoy/envoy.yaml']);
    expect(env(container(gateway, 'quota'), 'QUOTA_PORT')).toBe('8081');
    // Envoy sends EDGE_SECRET, detect checks it: both from the same Secret.
    const edgeRef = (c: { env: { name: string; valueFrom?: unknown }[] }) =>
      c.env.find((e) => e.name === 'EDGE_SECRET')?.valueFrom;
    expect(edgeRef(container(gateway, 'envoy'))).toEqual({
      secretKeyRef: { name: 'nsfwdetector-edge', key: 'edge-secret' },
    });
    expect(edgeRef(container(find(live, 'Deployment', 'nsfwdetector-detect'), 'detect'))).toEqual(
      edgeRef(container(gateway, 'envoy')),
    );

    // Every pod template: restricted profile, no token, probes, resources, drain window.
    for (const workload of live.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet')) {
      const spec = workload.spec.template.spec;
      expect(spec.automountServiceAccountToken, workload.metadata.name).toBe(false);
      expect(spec.securityContext.runAsNonRoot).toBe(true);
      expect(spec.securityContext.seccompProfile.type).toBe('RuntimeDefault');
      expect(spec.terminationGracePeriodSeconds).toBeGreaterThan(25);
      for (const c of spec.containers) {
        const where = `${workload.metadata.name}/${c.name}`;
        expect(c.securityContext.readOnlyRootFilesystem, where).toBe(true);
        expect(c.securityContext.allowPrivilegeEscalation, where).toBe(false);
        expect(c.securityContext.capabilities.drop, where).toEqual(['ALL']);
        expect(c.resources.requests.cpu, where).toBeDefined();
        expect(c.resources.limits.memory, where).toBeDefined();
        expect(c.readinessProbe, where).toBeDefined();
        expect(c.livenessProbe, where).toBeDefined();
        expect(c.startupProbe, where).toBeDefined();
      }
    }
    for (const name of ['nsfwdetector-detect', 'nsfwdetector-health']) {
      const readiness = container(
        find(live, 'Deployment', name),
        name.split('-')[1] as string,
      ).readinessProbe;
      expect(readiness.httpGet.path).toBe('/internal/ready');
    }
    // Limits reach the services as their configuration variables.
    expect(env(container(find(live, 'Deployment', 'nsfwdetector-detect'), 'detect'), 'ANON_PER_MINUTE')).toBe(
      '10',
    );

    const secretValue = async (name: string, key: string) => {
      const { stdout: secret } = await kube.kubectl(['get', 'secret', name, '-n', ns, '-o', 'json']);
      return (JSON.parse(secret) as Manifest).data?.[key];
    };
    const password = () => secretValue('nsfwdetector-redis', 'redis-password');
    const edgeSecret = () => secretValue('nsfwdetector-edge', 'edge-secret');
    const before = await password();
    const edgeBefore = await edgeSecret();
    expect(Buffer.from(edgeBefore ?? '', 'base64').toString()).toMatch(/^[A-Za-z0-9]{40}$/);
    expect(Buffer.from(before ?? '', 'base64').toString()).toMatch(/^[A-Za-z0-9]{32}$/);

    const upgrade = await helmOk(
      ['upgrade', 'nsfwdetector', CHART_DIR, '--namespace', ns, ...sets({ 'config.anonPerMinute': 20 })],
      { kubeconfig },
    );
    expect(upgrade.stderr).not.toMatch(/warning/i);
    expect(await password()).toBe(before);
    expect(await edgeSecret()).toBe(edgeBefore);
    const { stdout: detectAfter } = await kube.kubectl([
      'get',
      'deployment',
      'nsfwdetector-detect',
      '-n',
      ns,
      '-o',
      'json',
    ]);
    expect(env(container(JSON.parse(detectAfter) as Manifest, 'detect'), 'ANON_PER_MINUTE')).toBe('20');

    await helmOk(['uninstall', 'nsfwdetector', '--namespace', ns], { kubeconfig });
    const { stdout: left } = await kube.kubectl([
      'get',
      'all,configmaps,secrets,networkpolicies,hpa,pdb,serviceaccounts,roles,rolebindings,ingresses,persistentvolumeclaims',
      '--namespace',
      ns,
      '-o',
      'name',
    ]);
    // Only what the namespace itself holds (kube-root-ca.crt would come from a controller; none runs here).
    expect(left.trim().split('\n').filter(Boolean)).toEqual([]);
  });

  it('refuses values of the wrong type or unknown keys at install, with a clear message', async () => {
    const ns = await restrictedNamespace();
    const kubeconfig = kube.kubeconfig;
    const wrongType = await helm(
      ['install', 'bad', CHART_DIR, '--namespace', ns, ...sets({ 'detect.replicas': 'two' })],
      { kubeconfig },
    );
    expect(wrongType.code).not.toBe(0);
    expect(wrongType.stderr).toContain("values don't meet the specifications of the schema");
    expect(wrongType.stderr).toContain("at '/detect/replicas': got string, want integer");

    const unknown = await helm(
      ['install', 'bad', CHART_DIR, '--namespace', ns, ...sets({ 'detect.replica': 2 })],
      {
        kubeconfig,
      },
    );
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain("at '/detect': additional properties 'replica' not allowed");

    const outOfRange = await helm(
      ['install', 'bad', CHART_DIR, '--namespace', ns, ...sets({ 'config.thresholdBlock': 1.5 })],
      { kubeconfig },
    );
    expect(outOfRange.code).not.toBe(0);
    expect(outOfRange.stderr).toContain('/config/thresholdBlock');

    const noExternalUrl = await helm(
      ['install', 'bad', CHART_DIR, '--namespace', ns, ...sets({ 'redis.enabled': false })],
      {
        kubeconfig,
      },
    );
    expect(noExternalUrl.code).not.toBe(0);
    const twoTopologies = await helm(
      [
        'install',
        'bad',
        CHART_DIR,
        '--namespace',
        ns,
        ...sets({
          'redis.enabled': false,
          'redis.external.url': 'redis://r:6379/0',
          'redis.external.cluster.nodes': '{r:6379}',
        }),
      ],
      { kubeconfig },
    );
    expect(twoTopologies.code).not.toBe(0);
    expect(twoTopologies.stderr).toContain("at '/redis/external': 'oneOf' failed");
    // Nothing was installed by the refused attempts.
    expect((await helmOk(['list', '--namespace', ns, '-q'], { kubeconfig })).stdout.trim()).toBe('');
  });

  it("runs the helm test hook's script against the real server: passes when it answers, fails when it does not", async () => {
    const ns = await restrictedNamespace();
    await withServiceAccount(ns, {});
    const { items } = await serverDryRun(ns, await template({}));
    const hook = find(items, 'Pod', 'nsfwdetector-test').spec.containers[0];
    expect(hook.command).toEqual(['node', '--input-type=module', '-e']);
    const png = env(hook, 'PNG') ?? '';
    expect(env(hook, 'TRIES')).toBe('30');
    const runHook = (gateway: string, tries = '30') =>
      new Promise<{ code: number; out: string }>((resolve) => {
        execFile(
          process.execPath,
          ['--input-type=module', '-e', hook.args[0]],
          { env: { ...process.env, GATEWAY: gateway, PNG: png, TRIES: tries } },
          (err, stdout, stderr) => resolve({ code: err ? 1 : 0, out: stdout + stderr }),
        );
      });
    // The embedded server answers the same routes the gateway does.
    const server = await startServer({ SCORING_WORKERS: '1' });
    try {
      const passed = await runHook(server.url);
      expect(passed.out).toMatch(/health 200, detect 200 \((allow|review|block)\)/);
      expect(passed.code).toBe(0);
    } finally {
      await server.stop();
    }
    // No server: each try printed, then the hook fails.
    const failed = await runHook(server.url, '2');
    expect(failed.out).toMatch(/health #1: ECONNREFUSED[\s\S]*health #2: ECONNREFUSED[\s\S]*in 2 tries/);
    expect(failed.code).toBe(1);
  });

  it('mounts in the gateway exactly the Envoy configuration `npm run stack` runs', async () => {
    // The stack renders with values-local.yaml and the ports it learned; the same values here.
    const stackValues = {
      'envoy.listener.port': 8080,
      'envoy.upstreams.detect.port': 41001,
      'envoy.upstreams.health.port': 41002,
      'envoy.upstreams.quota.port': 41003,
      'envoy.admin.port': 0,
      'envoy.tracing.collector.port': 41004,
      ...LOCAL_FILTER_VALUES,
    };
    const stackFile = await renderEnvoyConfigText({ valuesFiles: [LOCAL_VALUES], set: stackValues });
    const ns = await restrictedNamespace();
    await withServiceAccount(ns, stackValues, ['--values', LOCAL_VALUES]);
    const { items } = await serverDryRun(ns, await template(stackValues, ['--values', LOCAL_VALUES]));
    const configMap = find(items, 'ConfigMap', 'nsfwdetector-envoy');
    expect(configMap.data?.['envoy.yaml']).toBe(stackFile);
    // And the gateway mounts that ConfigMap as Envoy's -c file.
    const gateway = find(items, 'Deployment', 'nsfwdetector-gateway');
    expect(gateway.spec.template.spec.volumes[0].configMap.name).toBe('nsfwdetector-envoy');
  });
});

function find(items: Manifest[], kind: string, name: string): Manifest {
  const found = items.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found)
    throw new Error(
      `no ${kind}/${name} among ${items.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')}`,
    );
  return found;
}

// biome-ignore lint/suspicious/noExplicitAny: a container spec, checked field by field
function container(workload: Manifest, name: string): any {
  const found = workload.spec.template.spec.containers.find((c: { name: string }) => c.name === name);
  if (!found) throw new Error(`${workload.metadata.name} has no container ${name}`);
  return found;
}

function env(c: { env: { name: string; value?: string }[] }, name: string): string | undefined {
  return c.env.find((e) => e.name === name)?.value;
}
