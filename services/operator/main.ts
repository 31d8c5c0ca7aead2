// The operator's process: configuration (config.ts: the core, Redis required, and OPERATOR_*),
// the kubeconfig (KUBECONFIG or in-cluster), Lease leader election, metrics and probes on
// OPERATOR_METRICS_PORT. Boots, logs, drains and stops as every process does (common/boot.ts): on
// SIGTERM readiness goes off, then the Lease is released and reconciles in progress finish, all under
// the grace timer. Each leadership term runs a fresh Operator (informers, queues); a lost Lease stops
// it and the process stays a candidate.
//   node --import tsx services/operator/main.ts

import { BootFailure, runProcess } from '../../lib/common/boot.ts';
import { loadOperatorConfig } from './config.ts';

const who = 'nsfwdetector operator';
await runProcess({
  who,
  serviceName: 'nsfwdetector-operator',
  load: loadOperatorConfig,
  compose: async (config, control) => {
    const k8s = await import('@kubernetes/client-node');
    const { openStoresOrExit } = await import('../quota/stores/open-stores.ts');
    const { buildOperatorService } = await import('./service.ts');
    const { LeaderElection } = await import('./leader-election.ts');
    const { createOperatorMetrics } = await import('./metrics.ts');
    const { Operator } = await import('./operator.ts');
    const { podPolicyReader } = await import('./policy-readers.ts');
    const { replicaListReader } = await import('./hash-list-readers.ts');
    const { RedisHashLists } = await import('../../lib/hash-lists/hash-list-redis.ts');
    const { closeRedis, connectRedis } = await import('../quota/stores/redis-connection.ts');

    const metrics = createOperatorMetrics();
    const app = buildOperatorService(config, metrics);
    const log = (msg: string, obj: object = {}) => app.log.info(obj, msg);
    const kc = new k8s.KubeConfig();
    try {
      kc.loadFromDefault();
    } catch (err) {
      throw new BootFailure(`cannot load the kubeconfig: ${(err as Error).message}`);
    }
    const kube = {
      objects: k8s.KubernetesObjectApi.makeApiClient(kc),
      apps: kc.makeApiClient(k8s.AppsV1Api),
      custom: kc.makeApiClient(k8s.CustomObjectsApi),
      core: kc.makeApiClient(k8s.CoreV1Api),
    };
    const stores = await openStoresOrExit(who, config, {
      clientName: 'nsfwdetector-operator',
      required: true,
    });
    // HashLists are published to the Redis the detect replicas read (lib/hash-lists/hash-list-redis.ts).
    const hashListRedis = connectRedis({
      target: config.redisTarget as NonNullable<typeof config.redisTarget>,
      commandTimeoutMs: config.redis.commandTimeoutMs,
      socketTimeoutMs: config.redis.socketTimeoutMs,
      connectTimeoutMs: config.redis.connectTimeoutMs,
      name: 'nsfwdetector-operator-hash-lists',
    });
    const hashLists = new RedisHashLists(hashListRedis, config.redis.keyPrefix);
    const newOperator = () =>
      new Operator({
        kc,
        kube,
        namespace: config.namespace,
        store: stores.accountStore,
        metrics,
        resyncMs: config.resyncMs,
        detectDeployment: config.detectDeployment,
        podPolicies:
          config.policyReaders.length > 0
            ? podPolicyReader(kc.makeApiClient(k8s.DiscoveryV1Api), config.namespace, config.policyReaders)
            : undefined,
        hashLists,
        replicaLists:
          config.hashListReaders.length > 0
            ? replicaListReader(
                kc.makeApiClient(k8s.DiscoveryV1Api),
                config.namespace,
                config.hashListReaders,
              )
            : undefined,
        log,
      });
    // Terms one after the other: a new one starts only once the previous one has stopped.
    let operator: InstanceType<typeof Operator> | undefined;
    let terms: Promise<void> = Promise.resolve();
    let stopping = false;
    const stopTerm = async () => {
      const current = operator;
      operator = undefined;
      await current?.stop();
    };
    const election = new LeaderElection({
      api: kc.makeApiClient(k8s.CoordinationV1Api),
      namespace: config.namespace,
      name: 'nsfwdetector-operator',
      identity: config.identity,
      leaseDurationSeconds: config.leaseSeconds,
      // client-go's proportions (15 s Lease, 10 s deadline).
      renewDeadlineMs: Math.round((config.leaseSeconds * 1000 * 2) / 3),
      retryPeriodMs: config.retryMs,
      onStartedLeading: () => {
        metrics.leader.set(1);
        terms = terms.then(async () => {
          if (stopping || !election.leading) return;
          operator = newOperator();
          await operator.start().catch((err) => {
            log('operator failed to start', { err: (err as Error).message });
            void control.stop('operator failed to start', 1);
          });
        });
      },
      // Another replica may take over now: stop reconciling (reconciles in progress finish), and stay a
      // candidate; winning the Lease again starts a new term.
      onStoppedLeading: () => {
        metrics.leader.set(0);
        terms = terms.then(stopTerm);
      },
      log,
    });
    return {
      app,
      port: config.metricsPort,
      announce: { service: 'operator', identity: config.identity },
      // Release the Lease (another replica takes over at once), finish the reconciles in progress.
      refuseNewWork: async () => {
        stopping = true;
        await election.stop();
        // Released: a scrape until the process exits must not count this replica as the leader.
        metrics.leader.set(0);
        terms = terms.then(stopTerm);
        await terms;
      },
      release: [() => stores.close(), () => closeRedis(hashListRedis)],
      start: async () => election.start(),
    };
  },
});
