// HashList → the list published to Redis (lib/hash-lists/hash-list-redis.ts), which every detect replica
// polls and swaps in whole once indexed. The hashes come from the ConfigMaps and Secrets the spec names
// (each key one hash a line, the admin CLI's format: lib/hash-lists/list-file.ts), so a list is not
// bounded by one object's 1 MiB: a million hashes are ~65 MB of text over as many objects as needed.
// All or nothing: a missing object or key, or one malformed line, publishes nothing — the list published
// before stays in force — and the status says which object, key and line (never its content).
// Ready means in force: with the detect replicas to ask (hash-list-readers.ts), Ready=True only once
// every ready replica holds the published digest; until then Progressing=True (Applying).
// A deleted HashList is removed from Redis by the operator (operator.ts: the key is no longer in the
// informer's cache), and lists of no HashList are swept at every start.

import type { V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import type { ListMeta, RedisHashLists } from '../../lib/hash-lists/hash-list-redis.ts';
import { HASH_LIST_ACTIONS, type HashListAction, LIST_NAME } from '../../lib/hash-lists/hash-list-store.ts';
import { ListFileError, parseHashList } from '../../lib/hash-lists/list-file.ts';
import { DEFAULT_MAX_DISTANCE } from '../../lib/hash-lists/pdq-hex.ts';
import { MAX_INDEX_DISTANCE } from '../../lib/hash-lists/pdq-index.ts';
import type { ReadReplicaLists } from './hash-list-readers.ts';
import { applyStatus, type CustomResource, conditions, event, type Kube, statusCode } from './kube.ts';

export const HASH_LIST_KIND = 'HashList';
export const HASH_LIST_PLURAL = 'hashlists';

interface SourceRef {
  configMap?: { name: string; keys?: string[] };
  secret?: { name: string; keys?: string[] };
}

/** Why a list cannot be published: the condition's reason, and a message naming where (never what). */
export class HashListSourceError extends Error {
  constructor(
    readonly reason: 'SourceNotFound' | 'InvalidHashes' | 'InvalidSpec',
    message: string,
  ) {
    super(message);
  }
}

/** The spec as the reconciler uses it; the CRD's schema checks the same, this is the last word. */
export function hashListSpec(cr: CustomResource): {
  action: HashListAction;
  maxDistance: number;
  sources: SourceRef[];
} {
  const s = cr.spec ?? {};
  const action = s.action as HashListAction;
  if (!HASH_LIST_ACTIONS.includes(action))
    throw new HashListSourceError(
      'InvalidSpec',
      `spec.action must be one of ${HASH_LIST_ACTIONS.join(', ')}`,
    );
  const maxDistance = (s.maxDistance as number | undefined) ?? DEFAULT_MAX_DISTANCE;
  if (!Number.isInteger(maxDistance) || maxDistance < 0 || maxDistance > MAX_INDEX_DISTANCE)
    throw new HashListSourceError('InvalidSpec', `spec.maxDistance must be 0..${MAX_INDEX_DISTANCE}`);
  if (!LIST_NAME.test(cr.metadata.name))
    throw new HashListSourceError(
      'InvalidSpec',
      `the name must match ${LIST_NAME.source} (it is what answers say)`,
    );
  const sources = (s.sources as SourceRef[] | undefined) ?? [];
  if (sources.length === 0)
    throw new HashListSourceError('InvalidSpec', 'spec.sources names no ConfigMap or Secret');
  return { action, maxDistance, sources };
}

/** Every key's text of one source, in key order (or the order the spec lists them). */
async function readSource(
  kube: Kube,
  namespace: string,
  ref: SourceRef,
): Promise<{ what: string; texts: Array<[string, string]> }> {
  const kind = ref.configMap ? 'ConfigMap' : 'Secret';
  const { name, keys } = (ref.configMap ?? ref.secret) as { name: string; keys?: string[] };
  const what = `${kind} ${name}`;
  let data: Record<string, string>;
  try {
    if (ref.configMap) {
      const cm: V1ConfigMap = await kube.core.readNamespacedConfigMap({ name, namespace });
      data = cm.data ?? {};
    } else {
      const secret: V1Secret = await kube.core.readNamespacedSecret({ name, namespace });
      data = Object.fromEntries(
        Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
      );
    }
  } catch (err) {
    if (statusCode(err) === 404) throw new HashListSourceError('SourceNotFound', `${what} not found`);
    throw err;
  }
  const chosen = keys ?? Object.keys(data).sort();
  const texts: Array<[string, string]> = [];
  for (const key of chosen) {
    const text = data[key];
    if (text === undefined) throw new HashListSourceError('SourceNotFound', `${what} has no key ${key}`);
    texts.push([key, text]);
  }
  return { what, texts };
}

/** The list's hashes, 32 bytes each, from every source in order; all or nothing. */
export async function readHashes(kube: Kube, namespace: string, sources: SourceRef[]): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for (const ref of sources) {
    const { what, texts } = await readSource(kube, namespace, ref);
    for (const [key, text] of texts) {
      try {
        parts.push(parseHashList(text));
      } catch (err) {
        if (err instanceof ListFileError)
          throw new HashListSourceError('InvalidHashes', `${what} key ${key} ${err.message}`);
        throw err;
      }
    }
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** How many of the ready replicas hold the published list; a sentence on those that do not. */
function replicasHolding(
  replicas: Awaited<ReturnType<ReadReplicaLists>>,
  name: string,
  meta: ListMeta,
): { holding: number; waiting?: string } {
  const behind = replicas.filter(
    (r) =>
      !r.lists?.some(
        (l) =>
          l.name === name &&
          l.digest === meta.digest &&
          l.action === meta.action &&
          l.maxDistance === meta.maxDistance,
      ),
  );
  const holding = replicas.length - behind.length;
  if (behind.length === 0) return { holding };
  const what = (r: (typeof replicas)[number]) =>
    r.error
      ? `${r.pod}: ${r.error}`
      : `${r.pod} holds ${r.lists?.find((l) => l.name === name) ? 'an older version' : 'no such list'}`;
  return { holding, waiting: `waiting for ${behind.map(what).join(', ')}` };
}

/** What was last published for a HashList (by uid), so the retries while replicas apply it skip the read. */
export interface RecentPublish {
  generation: number;
  at: number;
  meta: ListMeta;
}

/** How long a publication is taken as current without reading the sources again. */
const RECENT_MS = 10_000;

export async function reconcileHashList(
  kube: Kube,
  lists: RedisHashLists,
  cr: CustomResource,
  replicaLists?: ReadReplicaLists,
  recent?: Map<string, RecentPublish>,
): Promise<string> {
  if (cr.metadata.deletionTimestamp) return 'deleting';
  const name = cr.metadata.name;
  const generation = cr.metadata.generation ?? 0;
  const previous = cr.status?.conditions;
  let meta: ListMeta;
  try {
    const spec = hashListSpec(cr);
    const last = recent?.get(cr.metadata.uid);
    // Asked again while replicas pick it up (every second): what was just published still holds.
    const fresh = last && last.generation === generation && Date.now() - last.at < RECENT_MS;
    const hashes = fresh ? undefined : await readHashes(kube, cr.metadata.namespace, spec.sources);
    const published = hashes
      ? await lists.publish(name, spec.action, spec.maxDistance, hashes)
      : { changed: false, meta: (last as RecentPublish).meta };
    meta = published.meta;
    if (hashes && recent) {
      for (const [uid, r] of recent) if (Date.now() - r.at >= RECENT_MS) recent.delete(uid);
      recent.set(cr.metadata.uid, { generation, at: Date.now(), meta });
    }
    if (published.changed)
      await event(
        kube,
        cr,
        HASH_LIST_KIND,
        'Normal',
        'Published',
        `${meta.count} hashes (${spec.action}, distance ≤ ${spec.maxDistance}) published to the detect replicas`,
      );
  } catch (err) {
    if (!(err instanceof HashListSourceError)) throw err;
    const inForce = (await lists.entries()).get(name);
    const kept = inForce
      ? `; the list published before (${inForce.count} hashes) stays in force`
      : '; no version of this list is in force';
    const message = `${err.message}${kept}`;
    if (previous?.find((c) => c.type === 'Degraded' && c.status === 'True')?.message !== message)
      await event(kube, cr, HASH_LIST_KIND, 'Warning', err.reason, message);
    await applyStatus(kube, HASH_LIST_PLURAL, cr, HASH_LIST_KIND, {
      observedGeneration: generation,
      hashes: inForce?.count ?? 0,
      conditions: conditions(
        previous,
        [
          { type: 'Ready', status: 'False', reason: err.reason, message },
          { type: 'Progressing', status: 'False', reason: err.reason, message },
          { type: 'Degraded', status: 'True', reason: err.reason, message },
        ],
        generation,
      ),
    });
    return 'invalid';
  }
  const published = `${meta.count} hashes published`;
  let status: { ready: boolean; reason: string; message: string; replicas?: number; inForceOn?: number } = {
    ready: true,
    reason: 'Published',
    message: published,
  };
  if (replicaLists) {
    const replicas = await replicaLists();
    const { holding, waiting } = replicasHolding(replicas, name, meta);
    status = waiting
      ? {
          ready: false,
          reason: 'Applying',
          message: `${published}; in force on ${holding} of ${replicas.length} ready detect replica(s); ${waiting}`,
          replicas: replicas.length,
          inForceOn: holding,
        }
      : {
          ready: true,
          reason: 'InForce',
          message: `${published}; in force on ${holding} ready detect replica(s)`,
          replicas: replicas.length,
          inForceOn: holding,
        };
  }
  await applyStatus(kube, HASH_LIST_PLURAL, cr, HASH_LIST_KIND, {
    observedGeneration: generation,
    hashes: meta.count,
    digest: meta.digest,
    ...(status.replicas !== undefined && { replicas: status.replicas, replicasInForce: status.inForceOn }),
    conditions: conditions(
      previous,
      [
        {
          type: 'Ready',
          status: status.ready ? 'True' : 'False',
          reason: status.reason,
          message: status.message,
        },
        {
          type: 'Progressing',
          status: status.ready ? 'False' : 'True',
          reason: status.reason,
          message: status.message,
        },
        { type: 'Degraded', status: 'False', reason: status.reason, message: status.message },
      ],
      generation,
    ),
  });
  return status.ready ? 'published' : 'applying';
}

/** A HashList is gone: its list leaves Redis (the replicas drop it at their next poll). */
export async function removeHashList(lists: RedisHashLists, name: string): Promise<string> {
  return (await lists.remove(name)) ? 'removed' : 'gone';
}

/** The lists in Redis that no HashList names any more (deleted while no operator ran): removed. */
export async function sweepHashLists(lists: RedisHashLists, names: ReadonlySet<string>): Promise<string[]> {
  const removed: string[] = [];
  for (const name of (await lists.entries()).keys()) {
    if (names.has(name)) continue;
    await lists.remove(name);
    removed.push(name);
  }
  return removed;
}
