// Which policy generation the serving pods apply: every ready endpoint of the named Services (their
// EndpointSlices, the kubernetes.io/service-name label), asked GET /internal/policy on the named port
// (lib/policy/policy-report.ts). A ConfigMap change reaches a pod only when the kubelet next
// syncs its volume, so "rendered" and "in force" differ by up to the kubelet's sync period.

import type { DiscoveryV1Api } from '@kubernetes/client-node';
import { POLICY_REPORT_PATH, type PolicyReport, type PolicySource } from '../../lib/policy/policy-report.ts';

/** A Service whose ready pods must apply the policy, and the name of the port that answers. */
export interface PolicyReader {
  service: string;
  port: string;
}

/** One ready pod's answer: the policy source it applies (null: none), or why it could not tell. */
export interface PodPolicy {
  pod: string;
  source: PolicySource | null | undefined;
  error?: string;
}

export type ReadPodPolicies = () => Promise<PodPolicy[]>;

/** OPERATOR_POLICY_READERS: `service/port,…` (the chart: `<release>-detect/http,<release>-gateway/quota`). */
export function parsePolicyReaders(text: string | undefined): PolicyReader[] {
  if (!text?.trim()) return [];
  return text.split(',').map((item) => {
    const [service, port, ...rest] = item.trim().split('/');
    if (!service || !port || rest.length > 0)
      throw new Error(`expected service/port, got ${JSON.stringify(item.trim())}`);
    return { service, port };
  });
}

const TIMEOUT_MS = 2_000;

/** fetch's own message is "fetch failed": the cause says what (ECONNREFUSED, a timeout). */
function reason(err: Error): string {
  const cause = (err as { cause?: { message?: string } }).cause?.message;
  return cause ? `${err.message}: ${cause}` : err.message;
}

async function ask(url: string): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
  return ((await res.json()) as { data: unknown }).data;
}

/** One ready pod's answer to GET `path`: its body's `data`, or why there is none. */
export interface PodAnswer<T> {
  pod: string;
  data: T | undefined;
  error?: string;
}

/** Asks every ready endpoint of the readers' Services GET `path` on the named port (policy, hash lists). */
export async function askReadyPods<T>(
  discovery: DiscoveryV1Api,
  namespace: string,
  readers: readonly PolicyReader[],
  path: string,
): Promise<Array<PodAnswer<T>>> {
  const answers: Array<Promise<PodAnswer<T>>> = [];
  for (const { service, port } of readers) {
    const slices = await discovery.listNamespacedEndpointSlice({
      namespace,
      labelSelector: `kubernetes.io/service-name=${service}`,
    });
    for (const slice of slices.items) {
      const number = slice.ports?.find((p) => p.name === port)?.port;
      for (const endpoint of slice.endpoints) {
        // Terminating or not yet ready pods serve nothing (kube-proxy and Envoy leave them out).
        if (endpoint.conditions?.ready === false) continue;
        const address = endpoint.addresses[0];
        const pod = endpoint.targetRef?.name ?? address ?? '?';
        if (number === undefined || address === undefined) {
          answers.push(Promise.resolve({ pod, data: undefined, error: `no port ${port}` }));
          continue;
        }
        const host = slice.addressType === 'IPv6' ? `[${address}]` : address;
        answers.push(
          ask(`http://${host}:${number}${path}`).then(
            (data) => ({ pod, data: data as T }),
            (err: Error) => ({ pod, data: undefined, error: reason(err) }),
          ),
        );
      }
    }
  }
  return await Promise.all(answers);
}

export function podPolicyReader(
  discovery: DiscoveryV1Api,
  namespace: string,
  readers: readonly PolicyReader[],
): ReadPodPolicies {
  return async () =>
    (await askReadyPods<PolicyReport>(discovery, namespace, readers, POLICY_REPORT_PATH)).map((a) => ({
      pod: a.pod,
      source: a.data?.source,
      ...(a.error !== undefined && { error: a.error }),
    }));
}

/** Those of the pods that do not apply `name` at `generation` yet, as one sentence; undefined if all do. */
export function notYetApplying(
  pods: readonly PodPolicy[],
  name: string,
  generation: number,
): string | undefined {
  const behind = pods.filter((p) => p.source?.name !== name || p.source.generation !== generation);
  if (behind.length === 0) return undefined;
  const what = (p: PodPolicy) =>
    p.error
      ? `${p.pod}: ${p.error}`
      : p.source
        ? `${p.pod} has ${p.source.name} generation ${p.source.generation}`
        : `${p.pod} has none`;
  return `${pods.length - behind.length} of ${pods.length} ready pod(s) apply generation ${generation}; waiting for ${behind.map(what).join(', ')}`;
}
