// What the reconcilers say to the API server: server-side apply under the operator's field manager
// (objects and status), Events, conditions.

import {
  type AppsV1Api,
  type CoreV1Api,
  type CustomObjectsApi,
  type KubernetesObject,
  type KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';

export const FIELD_MANAGER = 'nsfwdetector-operator';
export const GROUP = 'nsfwdetector.io';
export const VERSION = 'v1alpha1';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime?: string;
}

export interface CustomResource extends KubernetesObject {
  metadata: NonNullable<KubernetesObject['metadata']> & { name: string; namespace: string; uid: string };
  spec: Record<string, unknown>;
  status?: { conditions?: Condition[]; [k: string]: unknown };
}

export interface Kube {
  objects: KubernetesObjectApi;
  apps: AppsV1Api;
  custom: CustomObjectsApi;
  core: CoreV1Api;
}

export function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/** Server-side apply of a whole object (force: the operator owns what it renders). */
export async function apply<T extends KubernetesObject>(kube: Kube, obj: T): Promise<T> {
  return await kube.objects.patch(
    obj,
    undefined,
    undefined,
    FIELD_MANAGER,
    true,
    PatchStrategy.ServerSideApply,
  );
}

/** Server-side apply of a custom resource's status subresource. */
export async function applyStatus(
  kube: Kube,
  plural: string,
  cr: CustomResource,
  kind: string,
  status: Record<string, unknown>,
): Promise<void> {
  await kube.custom.patchNamespacedCustomObjectStatus(
    {
      group: GROUP,
      version: VERSION,
      namespace: cr.metadata.namespace,
      plural,
      name: cr.metadata.name,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind, metadata: { name: cr.metadata.name }, status },
      fieldManager: FIELD_MANAGER,
      force: true,
    },
    setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
  );
}

/** The finalizers this manager owns on the object: [name] to hold it, [] to release it. */
export async function applyFinalizers(
  kube: Kube,
  plural: string,
  kind: string,
  cr: CustomResource,
  finalizers: string[],
): Promise<void> {
  await kube.custom.patchNamespacedCustomObject(
    {
      group: GROUP,
      version: VERSION,
      namespace: cr.metadata.namespace,
      plural,
      name: cr.metadata.name,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind, metadata: { name: cr.metadata.name, finalizers } },
      fieldManager: FIELD_MANAGER,
      force: true,
    },
    setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
  );
}

export function ownerReference(cr: CustomResource, kind: string) {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind,
    name: cr.metadata.name,
    uid: cr.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Keeps lastTransitionTime when a condition's status did not change. */
export function conditions(
  previous: Condition[] | undefined,
  next: Condition[],
  generation: number,
): Condition[] {
  const now = new Date().toISOString();
  return next.map((c) => {
    const before = previous?.find((p) => p.type === c.type);
    return {
      ...c,
      observedGeneration: generation,
      lastTransitionTime:
        before && before.status === c.status && before.lastTransitionTime ? before.lastTransitionTime : now,
    };
  });
}

/** A Kubernetes Event on the custom resource (what the operator did, or why it refused). */
export async function event(
  kube: Kube,
  cr: CustomResource,
  kind: string,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
): Promise<void> {
  const now = new Date();
  process.stdout.write(
    `${JSON.stringify({ time: now.toISOString(), service: 'operator', msg: 'event', kind, name: cr.metadata.name, type, reason, message })}\n`,
  );
  await kube.core
    .createNamespacedEvent({
      namespace: cr.metadata.namespace,
      body: {
        metadata: { generateName: `${cr.metadata.name}.`, namespace: cr.metadata.namespace },
        involvedObject: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind,
          name: cr.metadata.name,
          namespace: cr.metadata.namespace,
          uid: cr.metadata.uid,
        },
        type,
        reason,
        message,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
        source: { component: FIELD_MANAGER },
        reportingComponent: FIELD_MANAGER,
      },
    })
    .catch(() => undefined); // Events are best effort: never fail a reconcile for one.
}
