// The rollout rules on plain Deployment objects (the real API server runs them in
// test/operator/operator.test.ts).

import type { V1Deployment } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { configuredModel, MODEL_ANNOTATION, rolloutProgress, templateModel } from './detect-rollout.ts';

function detect(opts: {
  annotation?: string;
  env?: Array<{ name: string; value?: string; valueFrom?: object }>;
  container?: string;
}): V1Deployment {
  return {
    metadata: { name: 'nsfwdetector-detect', generation: 1 },
    spec: {
      selector: {},
      template: {
        metadata: opts.annotation ? { annotations: { [MODEL_ANNOTATION]: opts.annotation } } : {},
        spec: { containers: [{ name: opts.container ?? 'detect', env: opts.env ?? [] }] },
      },
    },
  };
}

describe('templateModel', () => {
  it('is the annotation once the operator has set it', () => {
    expect(
      templateModel(detect({ annotation: 'inception_v3', env: [{ name: 'MODEL', value: 'mobilenet_v2' }] })),
    ).toBe('inception_v3');
  });

  it("is the template's MODEL before that (its default when unset), so a matching policy rolls nothing", () => {
    expect(templateModel(detect({ env: [{ name: 'MODEL', value: 'inception_v3' }] }))).toBe('inception_v3');
    expect(templateModel(detect({ env: [] }))).toBe('mobilenet_v2');
  });

  it('is unknown (the operator rolls) for MODEL from a reference, another container, a bad annotation', () => {
    expect(
      templateModel(detect({ env: [{ name: 'MODEL', valueFrom: { configMapKeyRef: {} } }] })),
    ).toBeUndefined();
    expect(templateModel(detect({ container: 'sidecar' }))).toBeUndefined();
    expect(templateModel(detect({ annotation: 'ResNet' }))).toBeUndefined();
  });
});

describe('configuredModel', () => {
  it("is the detect container's MODEL whatever the annotation says: what detect loads when a policy names none", () => {
    expect(
      configuredModel(
        detect({ annotation: 'inception_v3', env: [{ name: 'MODEL', value: 'mobilenet_v2' }] }),
      ),
    ).toBe('mobilenet_v2');
    expect(configuredModel(detect({ annotation: 'inception_v3' }))).toBe('mobilenet_v2');
    expect(
      configuredModel(detect({ env: [{ name: 'MODEL', valueFrom: { configMapKeyRef: {} } }] })),
    ).toBeUndefined();
  });
});

describe('rolloutProgress', () => {
  const at = (generation: number, replicas: number, status: V1Deployment['status'], settled = false) => {
    const d = detect({});
    d.metadata = { generation };
    (d.spec as { replicas?: number }).replicas = replicas;
    d.status = status;
    return rolloutProgress(d, settled);
  };

  it('is incomplete until the controller has observed the generation', () => {
    expect(
      at(2, 1, { observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 1 }),
    ).toEqual({
      complete: false,
      detail: 'generation 2 not yet observed by the deployment controller',
    });
    expect(at(2, 1, undefined).complete).toBe(false);
  });

  it('is incomplete while old pods remain or no new one is available', () => {
    const surge = {
      observedGeneration: 2,
      replicas: 2,
      updatedReplicas: 1,
      availableReplicas: 1,
      unavailableReplicas: 1,
    };
    expect(at(2, 1, surge)).toEqual({
      complete: false,
      detail: '1 of 2 replica(s) updated, 1 available, 1 unavailable',
    });
    expect(
      at(2, 2, { observedGeneration: 2, replicas: 2, updatedReplicas: 2, availableReplicas: 0 }).complete,
    ).toBe(false);
  });

  it('is complete when every pod is updated and one is available', () => {
    expect(
      at(2, 2, { observedGeneration: 2, replicas: 2, updatedReplicas: 2, availableReplicas: 2 }).complete,
    ).toBe(true);
    // An HPA scale-up after the rollout: the new pods are of the current template, still starting.
    expect(
      at(2, 5, {
        observedGeneration: 2,
        replicas: 5,
        updatedReplicas: 5,
        availableReplicas: 2,
        unavailableReplicas: 3,
      }).complete,
    ).toBe(true);
  });

  it('is incomplete while a pod drains, unless the generation had rolled out already (an HPA scale-down)', () => {
    const draining = {
      observedGeneration: 2,
      replicas: 1,
      updatedReplicas: 1,
      availableReplicas: 1,
      terminatingReplicas: 1,
    };
    expect(at(2, 1, draining)).toEqual({
      complete: false,
      detail: '1 of 1 replica(s) updated, 1 available, 0 unavailable, 1 terminating',
    });
    expect(at(2, 1, draining, true).complete).toBe(true);
    expect(at(2, 1, { ...draining, terminatingReplicas: 0 }).complete).toBe(true);
  });
});
