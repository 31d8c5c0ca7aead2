// Ready = in force, on fakes: the reconciler with a recording Kube and pod answers given here, and the
// pod reader against a real HTTP server answering GET /internal/policy (the API server's EndpointSlice
// list faked). The real API server runs it in test/operator/operator.test.ts, the real node in
// test/kube/operator.suite.ts.

import type { DiscoveryV1Api, V1EndpointSlice } from '@kubernetes/client-node';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerPolicyReport } from '../../lib/policy/policy-report.ts';
import type { Condition, CustomResource, Kube } from './kube.ts';
import { type PodPolicy, parsePolicyReaders, podPolicyReader } from './policy-readers.ts';
import { reconcilePolicy } from './policy-reconciler.ts';

function recordingKube() {
  const statuses: Array<{ conditions: Condition[] }> = [];
  const kube = {
    objects: { patch: async (obj: unknown) => obj },
    custom: {
      patchNamespacedCustomObjectStatus: async (req: { body: { status: { conditions: Condition[] } } }) => {
        statuses.push(req.body.status);
      },
    },
    core: { createNamespacedEvent: async () => ({}) },
    apps: {},
  } as unknown as Kube;
  return { kube, statuses };
}

const policy: CustomResource = {
  apiVersion: 'nsfwdetector.io/v1alpha1',
  kind: 'DetectionPolicy',
  metadata: { name: 'main', namespace: 'ns', uid: 'u1', generation: 3 },
  spec: {
    thresholds: { allow: 0.2, block: 0.8 },
    model: 'mobilenet_v2',
    anonymous: { perMinute: 10, perDay: 30 },
    tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 1000 } },
    upload: { maxBytes: 1_000_000 },
  },
};
const at = (pod: string, generation: number): PodPolicy => ({ pod, source: { name: 'main', generation } });
const condition = (statuses: Array<{ conditions: Condition[] }>, type: string) =>
  statuses.at(-1)?.conditions.find((c) => c.type === type);

describe('reconcilePolicy: Ready means in force', () => {
  it('without pods to ask, Ready once the ConfigMap is written', async () => {
    const { kube, statuses } = recordingKube();
    expect(await reconcilePolicy(kube, policy, [policy])).toBe('rendered');
    expect(condition(statuses, 'Ready')).toMatchObject({
      status: 'True',
      reason: 'Rendered',
      observedGeneration: 3,
    });
  });

  it('not Ready while a ready pod applies an older generation, none or cannot be asked; Progressing (Applying)', async () => {
    for (const pods of [
      [at('detect-a', 3), at('gateway-b', 2)],
      [at('detect-a', 3), { pod: 'gateway-b', source: null }],
      [at('detect-a', 3), { pod: 'gateway-b', source: undefined, error: 'connect ECONNREFUSED' }],
      [at('detect-a', 3), { pod: 'gateway-b', source: { name: 'other', generation: 3 } }],
    ] as PodPolicy[][]) {
      const { kube, statuses } = recordingKube();
      expect(await reconcilePolicy(kube, policy, [policy], undefined, async () => pods)).toBe('applying');
      expect(condition(statuses, 'Ready')).toMatchObject({ status: 'False', reason: 'Applying' });
      const progressing = condition(statuses, 'Progressing');
      expect(progressing).toMatchObject({ status: 'True', reason: 'Applying', observedGeneration: 3 });
      expect(progressing?.message).toContain('1 of 2 ready pod(s) apply generation 3; waiting for gateway-b');
    }
  });

  it('Ready once every ready pod reports the generation', async () => {
    const { kube, statuses } = recordingKube();
    const pods = async () => [at('detect-a', 3), at('gateway-b', 3)];
    expect(await reconcilePolicy(kube, policy, [policy], undefined, pods)).toBe('rendered');
    expect(condition(statuses, 'Ready')).toMatchObject({ status: 'True', reason: 'Rendered' });
    expect(condition(statuses, 'Ready')?.message).toContain('in force in 2 ready pod(s)');
    expect(condition(statuses, 'Progressing')).toMatchObject({ status: 'False' });
  });
});

describe('parsePolicyReaders (OPERATOR_POLICY_READERS)', () => {
  it('reads service/port pairs; none when unset', () => {
    expect(parsePolicyReaders('a-detect/http, a-gateway/metrics-quota')).toEqual([
      { service: 'a-detect', port: 'http' },
      { service: 'a-gateway', port: 'metrics-quota' },
    ]);
    expect(parsePolicyReaders(undefined)).toEqual([]);
    expect(() => parsePolicyReaders('a-detect')).toThrow(/expected service\/port/);
  });
});

describe('podPolicyReader', () => {
  const app = Fastify();
  let port: number;
  beforeAll(async () => {
    registerPolicyReport(app, () => ({ name: 'main', generation: 7 }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as { port: number }).port;
  });
  afterAll(async () => await app.close());

  it('asks every ready endpoint of the Services on the named port; skips the not-ready; reports failures', async () => {
    const asked: string[] = [];
    const slice = (service: string, endpoints: V1EndpointSlice['endpoints']): V1EndpointSlice => ({
      addressType: 'IPv4',
      metadata: { labels: { 'kubernetes.io/service-name': service } },
      ports: [{ name: 'http', port }],
      endpoints,
    });
    const discovery = {
      listNamespacedEndpointSlice: async (req: { namespace: string; labelSelector: string }) => {
        asked.push(`${req.namespace} ${req.labelSelector}`);
        return {
          items: req.labelSelector.endsWith('=detect')
            ? [
                slice('detect', [
                  { addresses: ['127.0.0.1'], conditions: { ready: true }, targetRef: { name: 'detect-a' } },
                  {
                    addresses: ['127.0.0.2'],
                    conditions: { ready: false },
                    targetRef: { name: 'detect-old' },
                  },
                ]),
              ]
            : [slice('gateway', [{ addresses: ['127.0.0.1'], targetRef: { name: 'gateway-b' } }])].map(
                (s) => ({ ...s, ports: [{ name: 'other', port }] }),
              ),
        };
      },
    } as unknown as DiscoveryV1Api;
    const read = podPolicyReader(discovery, 'ns', parsePolicyReaders('detect/http,gateway/http'));
    expect(await read()).toEqual([
      { pod: 'detect-a', source: { name: 'main', generation: 7 } },
      { pod: 'gateway-b', source: undefined, error: 'no port http' },
    ]);
    expect(asked).toEqual(['ns kubernetes.io/service-name=detect', 'ns kubernetes.io/service-name=gateway']);
  });
});
