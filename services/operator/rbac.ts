// Every permission the operator needs from the Kubernetes API, in one table. The chart's Role
// (charts/nsfwdetector/templates/operator.yaml) grants exactly these and nothing else, and
// test/chart/operator-rbac.test.ts proves it against a real API server: the server's own rules review of
// the chart's ServiceAccount equals this table, the operator's requests (audit log) stay inside it, and
// the operator does its whole job with that ServiceAccount's token. A new API call in the operator is a
// new row here (and in the Role), or that test fails.

import { GROUP } from './kube.ts';

export type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch';

export interface OperatorPermission {
  /** '' is the core group. */
  apiGroup: string;
  /** A resource, or resource/subresource. */
  resource: string;
  /** The verbs of the operator's own requests (what the API server's audit log shows it doing). */
  requests: readonly Verb[];
  /**
   * Verbs the API server checks on the operator's behalf while serving one of those requests, never
   * requested as such: server-side apply that creates a missing object is authorized as `create`, and an
   * owner reference with blockOwnerDeletion needs `update` on the owner's finalizers
   * (OwnerReferencesPermissionEnforcement admission).
   */
  serverChecks?: readonly Verb[];
  /** Only one object of the installation (RBAC resourceNames), named by the release. */
  only?: keyof InstallationNames;
  why: string;
}

/** The objects of an installation the operator may touch by name only (chart: `<release>-detect`). */
export interface InstallationNames {
  detectDeployment: string;
}

export const OPERATOR_PERMISSIONS: readonly OperatorPermission[] = [
  {
    apiGroup: GROUP,
    resource: 'detectionpolicies',
    requests: ['list', 'watch'],
    why: 'informer (list+watch) of the policies in its namespace',
  },
  {
    apiGroup: GROUP,
    resource: 'apiaccounts',
    requests: ['list', 'watch', 'patch'],
    why: 'informer; its finalizer nsfwdetector.io/revoke-keys held and released by server-side apply',
  },
  {
    apiGroup: GROUP,
    resource: 'hashlists',
    requests: ['list', 'watch'],
    why: 'informer (list+watch) of the hash lists in its namespace',
  },
  {
    apiGroup: GROUP,
    resource: 'hashlists/status',
    requests: ['patch'],
    why: 'status: hashes in force, replicas holding them, conditions (server-side apply)',
  },
  {
    apiGroup: GROUP,
    resource: 'detectionpolicies/status',
    requests: ['patch'],
    why: 'status conditions with observedGeneration (server-side apply)',
  },
  {
    apiGroup: GROUP,
    resource: 'apiaccounts/status',
    requests: ['patch'],
    why: 'status: key ids, prefixes, conditions (server-side apply)',
  },
  {
    apiGroup: GROUP,
    resource: 'detectionpolicies/finalizers',
    requests: [],
    serverChecks: ['update'],
    why: 'the rendered ConfigMap is owned by its policy with blockOwnerDeletion',
  },
  {
    apiGroup: GROUP,
    resource: 'apiaccounts/finalizers',
    requests: [],
    serverChecks: ['update'],
    why: 'the key Secret is owned by its ApiAccount with blockOwnerDeletion',
  },
  {
    apiGroup: '',
    resource: 'configmaps',
    requests: ['get', 'patch'],
    serverChecks: ['create'],
    why: 'the rendered policy ConfigMap <policy>-policy (server-side apply); the ConfigMaps a HashList names, read (get by name)',
  },
  {
    apiGroup: '',
    resource: 'secrets',
    requests: ['get', 'patch'],
    serverChecks: ['create'],
    why: 'the key Secret <account>-keys: read to compare with the store, written by server-side apply; the Secrets a HashList names, read',
  },
  {
    apiGroup: '',
    resource: 'events',
    requests: ['create'],
    why: 'Events on the resources: what it did and why it refused',
  },
  {
    apiGroup: 'discovery.k8s.io',
    resource: 'endpointslices',
    requests: ['list'],
    why: 'the ready pods of the detect and gateway Services, asked which policy generation they apply',
  },
  {
    apiGroup: 'coordination.k8s.io',
    resource: 'leases',
    requests: ['get', 'create', 'update'],
    why: 'leader election on the Lease nsfwdetector-operator',
  },
  {
    apiGroup: 'apps',
    resource: 'deployments',
    requests: ['list', 'watch', 'patch'],
    only: 'detectDeployment',
    why: "the detect Deployment only: its informer (field selector on its name) and, on a model change, its pod template's annotation (server-side apply)",
  },
];

export interface Grant {
  apiGroup: string;
  resource: string;
  verb: Verb;
  /** Set when the grant is for this one object only (resourceNames). */
  name?: string;
}

/** The table as (group, resource, verb[, name]) grants: what the operator's Role must grant, exactly. */
export function operatorGrants(names: InstallationNames): Grant[] {
  return OPERATOR_PERMISSIONS.flatMap((p) =>
    [...p.requests, ...(p.serverChecks ?? [])].map((verb) => ({
      apiGroup: p.apiGroup,
      resource: p.resource,
      verb,
      ...(p.only ? { name: names[p.only] } : {}),
    })),
  );
}
