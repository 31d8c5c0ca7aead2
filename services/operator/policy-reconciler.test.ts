// What the reconciler renders and rolls for a policy that states only part of the spec, on a recording
// Kube (the real API server runs the same in test/operator/operator.test.ts).

import type { V1Deployment } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { MODEL_ANNOTATION } from './detect-rollout.ts';
import type { CustomResource, Kube } from './kube.ts';
import { reconcilePolicy, renderPolicy } from './policy-reconciler.ts';

function recordingKube() {
  const applied: Array<{ kind: string; data?: Record<string, string>; spec?: unknown }> = [];
  const kube = {
    objects: {
      patch: async (obj: { kind: string }) => {
        applied.push(obj);
        return obj;
      },
    },
    custom: { patchNamespacedCustomObjectStatus: async () => ({}) },
    core: { createNamespacedEvent: async () => ({}) },
    apps: {},
  } as unknown as Kube;
  return { kube, applied };
}

const policy = (spec: Record<string, unknown>): CustomResource => ({
  apiVersion: 'nsfwdetector.io/v1alpha1',
  kind: 'DetectionPolicy',
  metadata: { name: 'main', namespace: 'ns', uid: 'u1', generation: 2 },
  spec,
});

/** The detect Deployment as the chart renders it (MODEL from config.model), rolled out. */
function detect(model: string, annotation?: string): V1Deployment {
  return {
    metadata: { name: 'nsfwdetector-detect', namespace: 'ns', generation: 1 },
    spec: {
      replicas: 1,
      selector: {},
      template: {
        metadata: annotation ? { annotations: { [MODEL_ANNOTATION]: annotation } } : {},
        spec: { containers: [{ name: 'detect', env: [{ name: 'MODEL', value: model }] }] },
      },
    },
    status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 1 },
  };
}

const rolls = (applied: Array<{ kind: string; spec?: unknown }>) =>
  applied
    .filter((o) => o.kind === 'Deployment')
    .map((o) => (o.spec as { template: { metadata: { annotations: Record<string, string> } } }).template);

describe('renderPolicy', () => {
  it('renders what the spec states and nothing else', () => {
    expect(renderPolicy(policy({ thresholds: { allow: 0.2, block: 0.8 } }))).toEqual({
      source: { name: 'main', generation: 2 },
      thresholds: { allow: 0.2, block: 0.8 },
    });
    expect(renderPolicy(policy({ tiers: { pro: { perMinute: 60, perDay: 20_000 } } }))).toEqual({
      source: { name: 'main', generation: 2 },
      tiers: { pro: { perMinute: 60, perDay: 20_000 } },
    });
    expect(renderPolicy(policy({ maxFramesScored: 8 }))).toEqual({
      source: { name: 'main', generation: 2 },
      maxFramesScored: 8,
    });
  });

  it('refuses frames scored outside the setting’s range, as the services would', () => {
    expect(() => renderPolicy(policy({ maxFramesScored: 65 }))).toThrow(
      'maxFramesScored must be a number in [1, 64], got 65',
    );
    expect(() => renderPolicy(policy({ maxFramesScored: 2.5 }))).toThrow(
      'maxFramesScored must be a whole number, got 2.5',
    );
  });
});

describe('reconcilePolicy with a detect Deployment', () => {
  const target = (deployment: V1Deployment) => ({ name: 'nsfwdetector-detect', deployment });

  it('rolls nothing for a policy that names no model while the pods run the configured MODEL', async () => {
    const { kube, applied } = recordingKube();
    const cr = policy({ thresholds: { allow: 0.2, block: 0.8 } });
    expect(await reconcilePolicy(kube, cr, [cr], target(detect('inception_v3')))).toBe('rendered');
    expect(rolls(applied)).toEqual([]);
    const configMap = applied.find((o) => o.kind === 'ConfigMap');
    expect(JSON.parse(configMap?.data?.['policy.json'] as string)).not.toHaveProperty('model');
  });

  it('rolls the pods back to the configured MODEL once the policy no longer names the model it rolled', async () => {
    const { kube, applied } = recordingKube();
    const cr = policy({ thresholds: { allow: 0.2, block: 0.8 } });
    expect(await reconcilePolicy(kube, cr, [cr], target(detect('mobilenet_v2', 'inception_v3')))).toBe(
      'rolling',
    );
    expect(rolls(applied)).toEqual([{ metadata: { annotations: { [MODEL_ANNOTATION]: 'mobilenet_v2' } } }]);
  });

  it("rolls to the policy's model, spelt as MODEL spells it", async () => {
    const { kube, applied } = recordingKube();
    const cr = policy({ model: 'inception_v3' });
    expect(await reconcilePolicy(kube, cr, [cr], target(detect('mobilenet_v2')))).toBe('rolling');
    expect(rolls(applied)).toEqual([{ metadata: { annotations: { [MODEL_ANNOTATION]: 'inception_v3' } } }]);
  });
});
