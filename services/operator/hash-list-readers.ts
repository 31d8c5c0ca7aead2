// Which hash lists the detect replicas hold: every ready endpoint of the named Services asked GET
// /internal/hash-lists (policy-readers.ts askReadyPods; services/detect/hash-lists.ts answers: names,
// counts and digests, never a hash). A HashList is in force on a replica once the replica reports the
// list with the digest, action and distance the operator published.

import type { DiscoveryV1Api } from '@kubernetes/client-node';
import {
  HASH_LIST_REPORT_PATH,
  type HashListReport,
  type HeldList,
} from '../../lib/hash-lists/hash-list-report.ts';
import { askReadyPods, type PolicyReader } from './policy-readers.ts';

/** One ready replica's answer: the lists it holds, or why it could not tell. */
export interface ReplicaLists {
  pod: string;
  lists: HeldList[] | undefined;
  error?: string;
}

export type ReadReplicaLists = () => Promise<ReplicaLists[]>;

export function replicaListReader(
  discovery: DiscoveryV1Api,
  namespace: string,
  readers: readonly PolicyReader[],
): ReadReplicaLists {
  return async () =>
    (await askReadyPods<HashListReport>(discovery, namespace, readers, HASH_LIST_REPORT_PATH)).map((a) => ({
      pod: a.pod,
      lists: a.data?.lists,
      ...(a.error !== undefined && { error: a.error }),
    }));
}
