// A model change needs new detect pods (a process loads its model once, at boot, from the mounted
// policy file: services/detect/server.ts). The operator rolls the detect Deployment by one pod-template
// annotation, nsfwdetector.io/model, server-side applied under its field manager (the only field of
// the Deployment it owns), and follows the rollout in the Deployment's status. The annotation is the
// trigger, not the source: the new pods read the model from the ConfigMap, which is written first.
// Threshold and limit changes never touch the Deployment (the services re-read the file live).

import type { KubernetesObject, V1Deployment, V1DeploymentStatus } from '@kubernetes/client-node';
import { MODEL_NAMES, type ModelChoice, modelChoiceProblem } from '../../lib/common/model-catalogue.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { apply, type Kube } from './kube.ts';

export const MODEL_ANNOTATION = 'nsfwdetector.io/model';

function modelName(value: string | undefined): ModelChoice | undefined {
  if (value === undefined || modelChoiceProblem(value, MODEL_NAMES)) return undefined;
  return value as ModelChoice;
}

/**
 * The model the deployment is configured with: the detect container's MODEL (the chart's
 * `config.model`), its default when unset; what detect loads when the policy names none. Unknown
 * (MODEL from a reference, no detect container): undefined.
 */
export function configuredModel(deployment: V1Deployment): ModelChoice | undefined {
  const container = deployment.spec?.template?.spec?.containers.find((c) => c.name === 'detect');
  if (!container) return undefined;
  const env = container.env?.find((e) => e.name === 'MODEL');
  if (env?.valueFrom) return undefined;
  return modelName(env?.value ?? SETTINGS.MODEL.default);
}

/**
 * The model the pods of the current template run: the annotation once the operator has set it; before
 * that, the configured MODEL, so a fresh install whose policy names that same model is not rolled for
 * nothing. Unknown: undefined (roll).
 */
export function templateModel(deployment: V1Deployment): ModelChoice | undefined {
  const annotated = deployment.spec?.template?.metadata?.annotations?.[MODEL_ANNOTATION];
  if (annotated !== undefined) return modelName(annotated);
  return configuredModel(deployment);
}

export interface RolloutProgress {
  complete: boolean;
  /** "2 of 3 updated, 1 available" and the like, for the status message. */
  detail: string;
}

/**
 * Complete once the new model serves every request: the controller has seen the current generation, no
 * pod of an older template is left, and an updated pod is available. Not `kubectl rollout status`'s
 * "every wanted replica available": an HPA scale-up (new pods starting, of the current template) would
 * then turn the policy's Ready off although its model is in force everywhere.
 *
 * Nor is any pod terminating (status.terminatingReplicas, Kubernetes 1.35 and later): an old pod still
 * answers what reaches it while it drains on SIGTERM (kube-proxy and Envoy let go of it within
 * seconds), with the old model. The status cannot tell an old pod from a current one scaled down by the
 * HPA, so once a generation is `settled` (rolled out already) terminating pods no longer count.
 */
export function rolloutProgress(deployment: V1Deployment, settled = false): RolloutProgress {
  const generation = deployment.metadata?.generation ?? 0;
  const s: V1DeploymentStatus = deployment.status ?? {};
  const wanted = deployment.spec?.replicas ?? 1;
  const replicas = s.replicas ?? 0;
  const updated = s.updatedReplicas ?? 0;
  const available = s.availableReplicas ?? 0;
  const unavailable = s.unavailableReplicas ?? 0;
  const terminating = settled ? 0 : (s.terminatingReplicas ?? 0);
  if ((s.observedGeneration ?? 0) < generation) {
    return {
      complete: false,
      detail: `generation ${generation} not yet observed by the deployment controller`,
    };
  }
  const complete = updated === replicas && (wanted === 0 || available > 0) && terminating === 0;
  const draining = terminating > 0 ? `, ${terminating} terminating` : '';
  return {
    complete,
    detail: `${updated} of ${replicas} replica(s) updated, ${available} available, ${unavailable} unavailable${draining}`,
  };
}

/** Sets the annotation (a new pod template: Kubernetes rolls the pods); returns the Deployment after. */
export async function rollToModel(
  kube: Kube,
  deployment: V1Deployment,
  model: ModelChoice,
): Promise<V1Deployment> {
  // Apply names only the fields this manager owns (not a whole V1Deployment: no selector, no containers).
  const patch: KubernetesObject & { spec: object } = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: deployment.metadata?.name, namespace: deployment.metadata?.namespace },
    spec: { template: { metadata: { annotations: { [MODEL_ANNOTATION]: model } } } },
  };
  return (await apply(kube, patch)) as unknown as V1Deployment;
}
