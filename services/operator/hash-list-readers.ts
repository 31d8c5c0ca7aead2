// Which hash lists the detect replicas hold: every ready endpoint of the named Services (their
// EndpointSlices, as policy-readers.ts finds them), asked GET /internal/hash-lists (services/detect/
// hash-lists.ts: names, counts and digests, never a hash). A HashList is in force on a replica once the
// replica reports the list with the digest, action and distance the operator published.

import type { DiscoveryV1Api } from '@kubernetes/client-node';
import { HASH_LIST_REPORT_PATH, type HeldList } from '../../lib/hash-lists/hash-list-report.ts';
import type { PolicyReader } from './policy-readers.ts';

/** One ready replica's answer: the lists it holds, or why it could not tell. */
export interface ReplicaLists {
  pod: string;
  lists: HeldList[] | undefined;
  error?: string;
}

export type ReadReplicaLists = () => Promise<ReplicaLists[]>;

const TIMEOUT_MS = 2_000;

async function ask(url: string): Promise<HeldList[]> {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
  return ((await res.json()) as { data: { lists: HeldList[] } }).data.lists;
}

export function replicaListReader(
  discovery: DiscoveryV1Api,
  namespace: string,
  readers: readonly PolicyReader[],
): ReadReplicaLists {
  return async () => {
    const answers: Array<Promise<ReplicaLists>> = [];
    for (const { service, port } of readers) {
      const slices = await discovery.listNamespacedEndpointSlice({
        namespace,
        labelSelector: `kubernetes.io/service-name=${service}`,
      });
      for (const slice of slices.items) {
        const number = slice.ports?.find((p) => p.name === port)?.port;
        for (const endpoint of slice.endpoints) {
          // Not ready or terminating: it serves no request, so what it holds does not matter.
          if (endpoint.conditions?.ready === false) continue;
          const address = endpoint.addresses[0];
          const pod = endpoint.targetRef?.name ?? address ?? '?';
          if (number === undefined || address === undefined) {
            answers.push(Promise.resolve({ pod, lists: undefined, error: `no port ${port}` }));
            continue;
          }
          const host = slice.addressType === 'IPv6' ? `[${address}]` : address;
          answers.push(
            ask(`http://${host}:${number}${HASH_LIST_REPORT_PATH}`).then(
              (lists) => ({ pod, lists }),
              (err: Error) => ({
                pod,
                lists: undefined,
                error: (err as { cause?: { message?: string } }).cause?.message ?? err.message,
              }),
            ),
          );
        }
      }
    }
    return await Promise.all(answers);
  };
}
