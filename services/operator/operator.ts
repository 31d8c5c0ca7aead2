// The operator: informers (list+watch, periodic resync) on DetectionPolicy and ApiAccount feed a
// rate-limited work queue per kind; the reconcilers read the informer cache (level-triggered: a restart
// lists everything again and converges). Only the Lease holder runs informers and queues; main.ts starts
// one Operator per leadership term. With OPERATOR_DETECT_DEPLOYMENT a third informer watches that one
// Deployment (by metadata.name, which RBAC can restrict to it): its changes requeue the policies, so a
// rollout's status follows the Deployment's, level-triggered.

import {
  type CustomObjectsApi,
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  ListWatch,
  makeInformer,
  type ObjectCache,
  type V1Deployment,
  Watch,
} from '@kubernetes/client-node';
import type { RedisHashLists } from '../../lib/hash-lists/hash-list-redis.ts';
import type { AccountStore } from '../quota/accounts/account-store.ts';
import { ACCOUNT_KIND, ACCOUNT_PLURAL, reconcileAccount } from './account-reconciler.ts';
import type { ReadReplicaLists } from './hash-list-readers.ts';
import {
  HASH_LIST_KIND,
  HASH_LIST_PLURAL,
  type RecentPublish,
  reconcileHashList,
  removeHashList,
  sweepHashLists,
} from './hash-list-reconciler.ts';
import { type CustomResource, GROUP, type Kube, VERSION } from './kube.ts';
import type { OperatorMetrics } from './metrics.ts';
import type { ReadPodPolicies } from './policy-readers.ts';
import { POLICY_KIND, POLICY_PLURAL, reconcilePolicy } from './policy-reconciler.ts';
import { WorkQueue } from './work-queue.ts';

export interface OperatorOptions {
  kc: KubeConfig;
  kube: Kube;
  namespace: string;
  store: AccountStore;
  metrics: OperatorMetrics;
  resyncMs: number;
  /** The detect Deployment a model change rolls (the chart's `<release>-detect`); none: no rollouts. */
  detectDeployment?: string | undefined;
  /** The policy each serving pod applies (policy-readers.ts); none: Ready once the ConfigMap is written. */
  podPolicies?: ReadPodPolicies | undefined;
  /** How soon a policy whose pods do not all apply it yet is reconciled again. */
  applyingRetryMs?: number | undefined;
  /** Where HashLists are published for the detect replicas; none: HashLists are not watched. */
  hashLists?: RedisHashLists | undefined;
  /** The lists each detect replica holds (hash-list-readers.ts); none: Ready once published. */
  replicaLists?: ReadReplicaLists | undefined;
  log: (msg: string, obj?: object) => void;
}

type Cache<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

interface Watched {
  kind: string;
  informer: Cache<CustomResource>;
  queue: WorkQueue;
}

/** Restarts of a broken list/watch: 1 s doubling to 16 s; a watch that held for a minute starts over. */
const RESTART_BASE_MS = 1_000;
const RESTART_MAX_MS = 16_000;
const RESTART_RESET_MS = 60_000;

function informerFor(kc: KubeConfig, custom: CustomObjectsApi, namespace: string, plural: string) {
  return makeInformer<CustomResource>(
    kc,
    `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${plural}`,
    async () =>
      (await custom.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural,
      })) as KubernetesListObject<CustomResource>,
  );
}

function deploymentInformer(kube: Kube, kc: KubeConfig, namespace: string, name: string) {
  const fieldSelector = `metadata.name=${name}`;
  // makeInformer has no field selector; ListWatch (what it builds) takes one.
  return new ListWatch<V1Deployment>(
    `/apis/apps/v1/namespaces/${namespace}/deployments`,
    new Watch(kc),
    async () => await kube.apps.listNamespacedDeployment({ namespace, fieldSelector }),
    false,
    undefined,
    fieldSelector,
  );
}

export class Operator {
  readonly #watched: Watched[] = [];
  readonly #informers: Array<Cache<KubernetesObject>> = [];
  readonly #restarts = new Set<NodeJS.Timeout>();
  #resync: NodeJS.Timeout | undefined;
  #stopped = false;

  /**
   * A broken list or watch (API server restarted, network) reports 'error' and stops; it is started
   * again with backoff. It resumes from the last resourceVersion (the API server sends what happened
   * meanwhile) or, when that is too old (410 Gone), lists again; the cache and the handlers stay.
   */
  #restartOnError(kind: string, informer: Cache<KubernetesObject>): void {
    let failures = 0;
    let lastFailure = 0;
    const restart = (err: unknown) => {
      if (this.#stopped) return;
      if (Date.now() - lastFailure > RESTART_RESET_MS) failures = 0;
      lastFailure = Date.now();
      const delay = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** failures++);
      this.opts.log('watch failed; restarting', {
        kind,
        retryInMs: delay,
        err: (err as Error)?.message ?? String(err),
      });
      const timer = setTimeout(() => {
        this.#restarts.delete(timer);
        // A failed list or watch reports 'error' again; start() itself rejects only for an error
        // before any request (credentials): that one is retried the same way.
        if (!this.#stopped) informer.start().catch(restart);
      }, delay);
      timer.unref();
      this.#restarts.add(timer);
    };
    informer.on('error', restart);
  }

  constructor(readonly opts: OperatorOptions) {}

  async start(): Promise<void> {
    const { kc, kube, namespace, store, metrics, log, detectDeployment, podPolicies } = this.opts;
    const timed = (kind: string, fn: (key: string) => Promise<string>) => async (key: string) => {
      const end = metrics.duration.startTimer({ kind });
      try {
        const result = await fn(key);
        metrics.reconciles.inc({ kind, result });
        log('reconciled', { kind, key, result });
      } finally {
        end();
      }
    };
    const onError = (kind: string) => (key: string, err: unknown, retryInMs: number) => {
      metrics.errors.inc({ kind });
      log('reconcile failed; retrying', { kind, key, retryInMs, err: (err as Error).message ?? String(err) });
    };
    const policies = informerFor(kc, kube.custom, namespace, POLICY_PLURAL);
    const accounts = informerFor(kc, kube.custom, namespace, ACCOUNT_PLURAL);
    const deployments = detectDeployment
      ? deploymentInformer(kube, kc, namespace, detectDeployment)
      : undefined;
    if (deployments) this.#informers.push(deployments as Cache<KubernetesObject>);
    const byKey = (informer: ObjectCache<CustomResource>, key: string) => {
      const [ns, name] = key.split('/') as [string, string];
      return informer.get(name, ns);
    };
    const policyQueue = new WorkQueue(
      timed(POLICY_KIND, async (key) => {
        const cr = byKey(policies, key);
        if (!cr) return 'gone';
        const detect = detectDeployment
          ? { name: detectDeployment, deployment: deployments?.get(detectDeployment, namespace) }
          : undefined;
        const result = await reconcilePolicy(kube, cr, policies.list(), detect, podPolicies);
        // Nothing the operator watches changes when a kubelet updates a mounted file: ask the pods again.
        if (result === 'applying') policyQueue.addAfter(key, this.opts.applyingRetryMs ?? 1_000);
        return result;
      }),
      onError(POLICY_KIND),
    );
    const accountQueue = new WorkQueue(
      timed(ACCOUNT_KIND, async (key) => {
        const cr = byKey(accounts, key);
        if (!cr) return 'gone';
        return await reconcileAccount(kube, store, cr);
      }),
      onError(ACCOUNT_KIND),
    );
    const policyWatch: Watched = { kind: POLICY_KIND, informer: policies, queue: policyQueue };
    this.#watched.push(policyWatch, { kind: ACCOUNT_KIND, informer: accounts, queue: accountQueue });
    const { hashLists, replicaLists } = this.opts;
    const lists = hashLists && informerFor(kc, kube.custom, namespace, HASH_LIST_PLURAL);
    if (hashLists && lists) {
      const recentlyPublished = new Map<string, RecentPublish>();
      const listQueue: WorkQueue = new WorkQueue(
        timed(HASH_LIST_KIND, async (key) => {
          const cr = byKey(lists, key);
          // Deleted: its list leaves Redis (the key's name is the list's).
          if (!cr) return await removeHashList(hashLists, key.split('/')[1] as string);
          const result = await reconcileHashList(kube, hashLists, cr, replicaLists, recentlyPublished);
          // Replicas pick a list up at their next poll: ask them again until every one holds it.
          if (result === 'applying') listQueue.addAfter(key, this.opts.applyingRetryMs ?? 1_000);
          return result;
        }),
        onError(HASH_LIST_KIND),
      );
      this.#watched.push({ kind: HASH_LIST_KIND, informer: lists, queue: listQueue });
    }
    const enqueue = (w: Watched) => (obj: CustomResource) => {
      w.queue.add(`${obj.metadata.namespace}/${obj.metadata.name}`);
      metrics.queueDepth.set({ kind: w.kind }, w.queue.depth);
    };
    const requeueAll = (w: Watched) => () => {
      for (const obj of w.informer.list()) enqueue(w)(obj);
    };
    for (const w of this.#watched) {
      w.informer.on('add', enqueue(w));
      w.informer.on('update', enqueue(w));
      // A deleted policy hands the installation to the next oldest one: requeue the survivors.
      if (w.kind === POLICY_KIND) w.informer.on('delete', requeueAll(w));
      if (w.kind === HASH_LIST_KIND) w.informer.on('delete', enqueue(w));
      this.#restartOnError(w.kind, w.informer as Cache<KubernetesObject>);
      this.#informers.push(w.informer as Cache<KubernetesObject>);
    }
    if (deployments) {
      // The detect Deployment changed (its status during a rollout, or it appeared): the policies again.
      for (const verb of ['add', 'update', 'delete'] as const) deployments.on(verb, requeueAll(policyWatch));
      this.#restartOnError('Deployment', deployments as Cache<KubernetesObject>);
    }
    // The Deployment's cache first (pushed first), so the first policy reconciles see it.
    for (const informer of this.#informers) await informer.start();
    if (hashLists && lists) {
      // Lists whose HashList was deleted while no operator watched: their delete event is long gone.
      // Listed afresh, not from the cache: a cache whose first list failed is empty, and would sweep all.
      await kube.custom
        .listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: HASH_LIST_PLURAL })
        .then((listed) =>
          sweepHashLists(
            hashLists,
            new Set((listed as KubernetesListObject<CustomResource>).items.map((cr) => cr.metadata.name)),
          ),
        )
        .then(
          (removed) => removed.length > 0 && log('hash lists of no HashList removed', { lists: removed }),
          // Redis not there yet: the next start sweeps; a HashList deleted meanwhile stays matched until then.
          (err: Error) => log('hash lists not swept', { err: err.message }),
        );
    }
    // Resync: every object again, so drift (a ConfigMap edited by hand, a key revoked in Redis) heals.
    this.#resync = setInterval(() => {
      for (const w of this.#watched)
        for (const obj of w.informer.list()) w.queue.add(`${obj.metadata.namespace}/${obj.metadata.name}`);
    }, this.opts.resyncMs);
  }

  /** Graceful: no new work, the reconciles in progress finish, watches close. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#resync) clearInterval(this.#resync);
    for (const t of this.#restarts) clearTimeout(t);
    for (const w of this.#watched) await w.queue.close();
    for (const informer of this.#informers) await informer.stop();
  }
}
