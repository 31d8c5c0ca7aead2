// The operator: informers (list+watch, periodic resync) on DetectionPolicy and ApiAccount feed a
// rate-limited work queue per kind; the reconcilers read the informer cache (level-triggered: a restart
// lists everything again and converges). Only the Lease holder runs informers and queues.

import {
  type CustomObjectsApi,
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  makeInformer,
  type ObjectCache,
} from '@kubernetes/client-node';
import type { AccountStore } from '../quota/account-store.ts';
import { ACCOUNT_KIND, ACCOUNT_PLURAL, reconcileAccount } from './account-reconciler.ts';
import { type CustomResource, GROUP, type Kube, VERSION } from './kube.ts';
import type { OperatorMetrics } from './metrics.ts';
import { POLICY_KIND, POLICY_PLURAL, reconcilePolicy } from './policy-reconciler.ts';
import { WorkQueue } from './work-queue.ts';

export interface OperatorOptions {
  kc: KubeConfig;
  kube: Kube;
  namespace: string;
  store: AccountStore;
  metrics: OperatorMetrics;
  resyncMs: number;
  log: (msg: string, obj?: object) => void;
}

interface Watched {
  kind: string;
  informer: Informer<CustomResource> & ObjectCache<CustomResource>;
  queue: WorkQueue;
}

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

export class Operator {
  readonly #watched: Watched[] = [];
  #resync: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(readonly opts: OperatorOptions) {}

  async start(): Promise<void> {
    const { kc, kube, namespace, store, metrics, log } = this.opts;
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
    const byKey = (informer: ObjectCache<CustomResource>, key: string) => {
      const [ns, name] = key.split('/') as [string, string];
      return informer.get(name, ns);
    };
    const policyQueue = new WorkQueue(
      timed(POLICY_KIND, async (key) => {
        const cr = byKey(policies, key);
        if (!cr) return 'gone';
        return await reconcilePolicy(kube, cr, policies.list());
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
    this.#watched.push(
      { kind: POLICY_KIND, informer: policies, queue: policyQueue },
      { kind: ACCOUNT_KIND, informer: accounts, queue: accountQueue },
    );
    for (const w of this.#watched) {
      const enqueue = (obj: CustomResource) => {
        w.queue.add(`${obj.metadata.namespace}/${obj.metadata.name}`);
        metrics.queueDepth.set({ kind: w.kind }, w.queue.depth);
      };
      w.informer.on('add', enqueue);
      w.informer.on('update', enqueue);
      w.informer.on('delete', () => {
        // A deleted policy hands the installation to the next oldest one: requeue the survivors.
        if (w.kind === POLICY_KIND) for (const p of w.informer.list()) enqueue(p);
      });
      // A broken watch (API server restarted, network) restarts with a fresh list after a pause.
      w.informer.on('error', (err) => {
        log('watch failed; restarting', { kind: w.kind, err: (err as Error)?.message ?? String(err) });
        setTimeout(() => {
          if (!this.#stopped) w.informer.start().catch(() => undefined);
        }, 1_000).unref();
      });
      await w.informer.start();
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
    for (const w of this.#watched) await w.queue.close();
    for (const w of this.#watched) await w.informer.stop();
  }
}
