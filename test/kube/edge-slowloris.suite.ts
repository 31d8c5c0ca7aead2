// The edge under a reconnecting slowloris on the local node (npm run kube:up): the chart's Envoy in the
// gateway pod with the chart's defaults (docs/edge.md: its per-source connection bound, loaded from the
// ConfigMap, and the time bounds). A release of its own; an
// attacker pod (one source: its pod IP) runs test/e2e/slowloris.run.ts from a ConfigMap — 7,000
// connections, each opened again the moment Envoy closes it, trickling header bytes, then the same
// sending nothing — while this process (another source: the node) calls health and detect through the
// gateway Service: ≥ 90% of them answered 200, and the per-source bound refused the attacker's
// connections past its bound. The release and its namespace are removed after.
// Figures print with a `kube-node:` prefix.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { CALLS, callThroughout, summary } from '../e2e/slow-clients.calls.ts';
import {
  describeWithKubeNode,
  installChart,
  type KubeNodeFacts,
  kubectl,
  kubectlJson,
  type NodeImages,
  pushImages,
  removeRelease,
} from '../support/kube-node.ts';

const RELEASE = 'edge';
const NS = 'nsfwdetector-edge';
const ATTACKER = new URL('../e2e/slowloris.run.ts', import.meta.url);
const SLOTS = 7_000;
/** The chart's default per-source bound (envoy.sourceConnectionLimit.maxConnections). */
const SOURCE_BOUND = 512;
const REFUSED = 'wasmcustom.source_connection_limit.refused';

const ATTACKS = [
  { name: 'one byte / 15 s, each reopened the moment it is closed', env: { RECONNECT: 'at-once' } },
  {
    name: 'sending nothing, each reopened the moment it is closed',
    env: { RECONNECT: 'at-once', SEND: 'nothing' },
  },
];

interface AttackState {
  open: number;
  peakOpen: number;
  connects: number;
  closes: number;
  errors: number;
}

/** The phase, on the node test/kube/node.test.ts brings up (`nodeFacts` once it is up). */
export function edgeSlowlorisOnTheNode(nodeFacts: () => KubeNodeFacts): void {
  describeWithKubeNode('the edge under a reconnecting slowloris on the local node', () => {
    let facts: KubeNodeFacts;
    let images: NodeImages;
    let edge: { host: string; port: number };
    const k = (...args: string[]) => kubectl(facts, ['-n', NS, ...args]);

    /** Envoy's connection counters and the per-source bound's, summed over the gateway pods (admin on loopback). */
    const envoyStats = async (): Promise<Record<string, number>> => {
      const pods = await kubectlJson(facts, [
        '-n',
        NS,
        'get',
        'pods',
        '-l',
        'app.kubernetes.io/component=gateway',
      ]);
      const sum: Record<string, number> = {};
      for (const pod of pods.items) {
        const out = await k(
          'exec',
          pod.metadata.name,
          '-c',
          'quota',
          '--',
          'node',
          '-e',
          "fetch('http://127.0.0.1:9901/stats?format=json&filter=^(http.edge.downstream_(cx_active|cx_idle_timeout|rq_idle_timeout|rq_header_timeout)|wasmcustom.source_connection_limit.(refused|open|uncounted))$').then(r=>r.json()).then(j=>console.log(JSON.stringify(j.stats)))",
        );
        for (const s of JSON.parse(out.trim().split('\n').at(-1) ?? '[]') as Array<{
          name: string;
          value?: number;
        }>)
          sum[s.name] = (sum[s.name] ?? 0) + (s.value ?? 0);
      }
      return sum;
    };

    beforeAll(async () => {
      facts = nodeFacts();
      images = await pushImages(facts);
      const started = performance.now();
      await installChart(facts, images, {
        release: RELEASE,
        namespace: NS,
        set: { 'config.anonPerMinute': '100000', 'config.anonPerDay': '1000000' },
      });
      console.log(
        `kube-node: edge: helm install --wait ${Math.round((performance.now() - started) / 100) / 10} s`,
      );
      const svc = await kubectlJson(facts, ['-n', NS, 'get', 'service', `${RELEASE}-gateway`]);
      edge = { host: svc.spec.clusterIP, port: svc.spec.ports[0].port };
      await k('create', 'configmap', 'slowloris', `--from-file=slowloris.run.ts=${ATTACKER.pathname}`);
    }, 1_800_000);

    afterAll(async () => {
      if (facts) await removeRelease(facts, RELEASE, NS);
    }, 600_000);

    it.each(ATTACKS)(
      'answers health and detect for other clients: 7,000 slots from one pod, $name',
      async ({ name, env }) => {
        const pod = {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'slowloris', namespace: NS },
          spec: {
            terminationGracePeriodSeconds: 0,
            restartPolicy: 'Never',
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 1000,
              seccompProfile: { type: 'RuntimeDefault' },
            },
            containers: [
              {
                name: 'slowloris',
                image: images.image,
                args: ['/attack/slowloris.run.ts'],
                env: [
                  { name: 'EDGE_HOST', value: edge.host },
                  { name: 'EDGE_PORT', value: String(edge.port) },
                  { name: 'FROM_ADDRESS', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
                  { name: 'SLOTS', value: String(SLOTS) },
                  { name: 'INTERVAL_MS', value: '15000' },
                  { name: 'DURATION_MS', value: '150000' },
                  ...Object.entries(env).map(([n, value]) => ({ name: n, value })),
                ],
                volumeMounts: [{ name: 'attack', mountPath: '/attack', readOnly: true }],
                securityContext: {
                  allowPrivilegeEscalation: false,
                  readOnlyRootFilesystem: true,
                  capabilities: { drop: ['ALL'] },
                },
                resources: { requests: { cpu: '10m', memory: '64Mi' } },
              },
            ],
            volumes: [{ name: 'attack', configMap: { name: 'slowloris' } }],
          },
        };
        const before = await envoyStats();
        await kubectl(facts, ['apply', '-f', '-'], JSON.stringify(pod));
        try {
          const attack = async (): Promise<AttackState | undefined> => {
            const lines = (await k('logs', 'slowloris').catch(() => ''))
              .split('\n')
              .filter((l) => l.startsWith('{'));
            return lines.length ? (JSON.parse(lines.at(-1) as string) as AttackState) : undefined;
          };
          const deadline = Date.now() + 120_000;
          while (((await attack())?.connects ?? 0) < SLOTS) {
            expect(
              Date.now() < deadline,
              `the attacker connected ${(await attack())?.connects ?? 0} of ${SLOTS}`,
            ).toBe(true);
            await new Promise((r) => setTimeout(r, 1000));
          }
          const atStart = await attack();
          const { results, seconds } = await callThroughout(edge);
          const during = await attack();
          const after = await envoyStats();
          const delta = (stat: string) => (after[stat] ?? 0) - (before[stat] ?? 0);
          const figures = {
            health: summary(results, 'health'),
            detect: summary(results, 'detect'),
            attacker: during,
            attackerConnectsPerSecond: Math.round(
              ((during?.connects ?? 0) - (atStart?.connects ?? 0)) / seconds,
            ),
            cutByTimeouts:
              delta('http.edge.downstream_cx_idle_timeout') +
              delta('http.edge.downstream_rq_idle_timeout') +
              delta('http.edge.downstream_rq_header_timeout'),
            edgeConnectionsAfter: after['http.edge.downstream_cx_active'],
            refusedBySourceBound: delta(REFUSED),
            refusedBySourceBoundPerSecond: Math.round(delta(REFUSED) / seconds),
            countedAfter: after['wasmcustom.source_connection_limit.open'],
          };
          console.log(
            `kube-node: edge slowloris (${SLOTS} slots from one pod, ${name}): ${JSON.stringify(figures)}`,
          );
          expect((await k('get', 'pod', 'slowloris', '-o', 'jsonpath={.status.phase}')).trim()).toBe(
            'Running',
          );
          expect(during?.connects ?? 0).toBeGreaterThan(SLOTS);
          expect(figures.refusedBySourceBound).toBeGreaterThan(SLOTS - SOURCE_BOUND);
          for (const kind of ['health', 'detect'] as const) {
            const { statuses } = figures[kind];
            expect(statuses['200'] ?? 0, kind).toBeGreaterThanOrEqual(Math.ceil(0.9 * CALLS));
          }
        } finally {
          await k('delete', 'pod', 'slowloris', '--wait', '--timeout=60s');
        }
      },
      600_000,
    );
  });
}
