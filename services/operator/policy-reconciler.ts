// DetectionPolicy → ConfigMap `<name>-policy` (the rendered policy file, owned by the policy) and status
// conditions with observedGeneration. One policy per installation: in a namespace the oldest policy
// (creationTimestamp, then name) is in force; any other one is Degraded with reason Superseded and
// renders nothing.
// With a detect Deployment (OPERATOR_DETECT_DEPLOYMENT), a model change rolls it (detect-rollout.ts):
// Progressing=True (RollingOut) and Ready=False until its status shows the rollout complete.
// Ready means in force: with the serving pods to ask (policy-readers.ts), Ready=True only once every ready
// pod reports this generation; until then Progressing=True (Applying) and the operator asks again.

import type { V1Deployment } from '@kubernetes/client-node';
import { POLICY_FILE_KEY, type PolicyDocument, parsePolicy } from '../../lib/policy/policy-file.ts';
import { configuredModel, rolloutProgress, rollToModel, templateModel } from './detect-rollout.ts';
import {
  apply,
  applyStatus,
  type CustomResource,
  conditions,
  event,
  type Kube,
  ownerReference,
} from './kube.ts';
import { notYetApplying, type ReadPodPolicies } from './policy-readers.ts';

export const POLICY_KIND = 'DetectionPolicy';
export const POLICY_PLURAL = 'detectionpolicies';

export function policyConfigMapName(policyName: string): string {
  return `${policyName}-policy`;
}

/**
 * The file the services read: what the spec states, and nothing else. The CRD declares no defaults, so
 * what the policy leaves out stays as the deployment is configured (the services merge).
 */
export function renderPolicy(cr: CustomResource): PolicyDocument {
  const s = (cr.spec ?? {}) as Record<string, unknown>;
  const doc = {
    source: { name: cr.metadata.name, generation: cr.metadata.generation ?? 0 },
    thresholds: s.thresholds,
    model: s.model,
    anonymous: s.anonymous,
    tiers: s.tiers,
    upload: s.upload,
    maxFramesScored: s.maxFramesScored,
  };
  // The same validation the services run: a file they would refuse is never written.
  return parsePolicy(JSON.stringify(doc));
}

/** What a policy states, for the Rendered event: `allow 0.2, block 0.8, model inception_v3`. */
function stated(doc: PolicyDocument): string {
  const parts = [
    doc.thresholds && `allow ${doc.thresholds.allow}, block ${doc.thresholds.block}`,
    doc.model && `model ${doc.model}`,
    doc.anonymous && `anonymous ${doc.anonymous.perMinute}/min ${doc.anonymous.perDay}/day`,
    doc.tiers?.free && `free ${doc.tiers.free.perMinute}/min ${doc.tiers.free.perDay}/day`,
    doc.tiers?.pro && `pro ${doc.tiers.pro.perMinute}/min ${doc.tiers.pro.perDay}/day`,
    doc.upload?.maxBytes !== undefined && `upload ${doc.upload.maxBytes} bytes`,
    doc.maxFramesScored !== undefined && `${doc.maxFramesScored} frame(s) scored`,
  ].filter(Boolean);
  return parts.length ? parts.join(', ') : 'nothing: the configuration applies';
}

function older(a: CustomResource, b: CustomResource): number {
  const ta = a.metadata.creationTimestamp ? new Date(a.metadata.creationTimestamp).getTime() : 0;
  const tb = b.metadata.creationTimestamp ? new Date(b.metadata.creationTimestamp).getTime() : 0;
  return ta - tb || a.metadata.name.localeCompare(b.metadata.name);
}

/** The detect Deployment the policy's model is rolled into: its name, and as the informer sees it. */
export interface DetectTarget {
  name: string;
  deployment: V1Deployment | undefined;
}

/** The status of a policy that is not applied, for `reason`: not ready, not progressing, degraded. */
async function markNotApplied(
  kube: Kube,
  cr: CustomResource,
  reason: string,
  message: string,
): Promise<void> {
  const generation = cr.metadata.generation ?? 0;
  await applyStatus(kube, POLICY_PLURAL, cr, POLICY_KIND, {
    observedGeneration: generation,
    conditions: conditions(
      cr.status?.conditions,
      [
        { type: 'Ready', status: 'False', reason, message },
        { type: 'Progressing', status: 'False', reason, message },
        { type: 'Degraded', status: 'True', reason, message },
      ],
      generation,
    ),
  });
}

export async function reconcilePolicy(
  kube: Kube,
  cr: CustomResource,
  all: readonly CustomResource[],
  detect?: DetectTarget,
  podPolicies?: ReadPodPolicies,
): Promise<string> {
  if (cr.metadata.deletionTimestamp) return 'deleting'; // the ConfigMap goes with it (owner reference)
  const generation = cr.metadata.generation ?? 0;
  const previous = cr.status?.conditions;
  const inForce = [...all]
    .filter((p) => p.metadata.namespace === cr.metadata.namespace && !p.metadata.deletionTimestamp)
    .sort(older)[0];
  if (inForce && inForce.metadata.uid !== cr.metadata.uid) {
    const message = `DetectionPolicy ${inForce.metadata.name} is in force in this namespace; only one policy applies`;
    if (previous?.find((c) => c.type === 'Degraded')?.reason !== 'Superseded') {
      await event(kube, cr, POLICY_KIND, 'Warning', 'Superseded', message);
    }
    await markNotApplied(kube, cr, 'Superseded', message);
    return 'superseded';
  }
  let doc: PolicyDocument;
  try {
    doc = renderPolicy(cr);
  } catch (err) {
    const message = `The policy cannot be rendered: ${(err as Error).message}`;
    await event(kube, cr, POLICY_KIND, 'Warning', 'InvalidPolicy', message);
    await markNotApplied(kube, cr, 'InvalidPolicy', message);
    return 'invalid';
  }
  const name = policyConfigMapName(cr.metadata.name);
  await apply(kube, {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name,
      namespace: cr.metadata.namespace,
      labels: {
        'app.kubernetes.io/managed-by': 'nsfwdetector-operator',
        'nsfwdetector.io/policy': cr.metadata.name,
      },
      ownerReferences: [ownerReference(cr, POLICY_KIND)],
    },
    data: { [POLICY_FILE_KEY]: `${JSON.stringify(doc, null, 2)}\n` },
  });
  // Events once per generation (every reconcile of a rollout passes here again).
  const was = (type: string, ...reasons: string[]) => {
    const c = previous?.find((p) => p.type === type);
    return c?.observedGeneration === generation && reasons.includes(c.reason);
  };
  if (!was('Ready', 'Rendered', 'RollingOut', 'RolledOut', 'Applying')) {
    await event(
      kube,
      cr,
      POLICY_KIND,
      'Normal',
      'Rendered',
      `Generation ${generation} rendered into ConfigMap ${name} (${stated(doc)})`,
    );
  }
  const rendered = `Generation ${generation} is in ConfigMap ${name}; services apply it on their next request`;
  // The ConfigMap first, then the roll: the new pods mount the file that names the new model.
  let rollout: { complete: boolean; message: string } = { complete: true, message: rendered };
  // The model the pods must run: the policy's, or the deployment's own MODEL when it names none (a model
  // the policy named before and no longer does is rolled back).
  const model = detect?.deployment && (doc.model ?? configuredModel(detect.deployment));
  if (detect?.deployment && model) {
    let deployment = detect.deployment;
    if (templateModel(deployment) !== model) {
      deployment = await rollToModel(kube, deployment, model);
      if (!was('Progressing', 'RollingOut'))
        await event(
          kube,
          cr,
          POLICY_KIND,
          'Normal',
          'RollingOut',
          `Model ${model}: Deployment ${detect.name} rolls its pods (annotation nsfwdetector.io/model)`,
        );
    }
    const progress = rolloutProgress(deployment, was('Ready', 'RolledOut'));
    rollout = progress.complete
      ? { complete: true, message: `${rendered}; Deployment ${detect.name} runs model ${model}` }
      : {
          complete: false,
          message: `Deployment ${detect.name} is rolling out model ${model}: ${progress.detail}`,
        };
  } else if (detect && !detect.deployment) {
    rollout.message = `${rendered}; no Deployment ${detect.name} to roll`;
  }
  let reason = !detect?.deployment ? 'Rendered' : rollout.complete ? 'RolledOut' : 'RollingOut';
  if (rollout.complete && podPolicies) {
    const pods = await podPolicies();
    const waiting = notYetApplying(pods, cr.metadata.name, generation);
    if (waiting) {
      rollout = { complete: false, message: `${rendered}; ${waiting}` };
      reason = 'Applying';
    } else {
      rollout.message = `${rollout.message}; in force in ${pods.length} ready pod(s)`;
    }
  }
  const { complete, message } = rollout;
  await applyStatus(kube, POLICY_PLURAL, cr, POLICY_KIND, {
    observedGeneration: generation,
    configMap: name,
    conditions: conditions(
      previous,
      [
        { type: 'Ready', status: complete ? 'True' : 'False', reason, message },
        { type: 'Progressing', status: complete ? 'False' : 'True', reason, message },
        { type: 'Degraded', status: 'False', reason, message },
      ],
      generation,
    ),
  });
  return complete ? 'rendered' : reason === 'Applying' ? 'applying' : 'rolling';
}
