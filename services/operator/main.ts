// The operator's process: configuration (config.ts: the core, Redis required, and OPERATOR_*),
// the kubeconfig (KUBECONFIG or in-cluster), Lease leader election, metrics on OPERATOR_METRICS_PORT,
// graceful shutdown on SIGTERM/SIGINT (release the Lease, finish reconciles in progress). Each
// leadership term runs a fresh Operator (informers, queues); a lost Lease stops it and the process
// stays a candidate.
//   node --import tsx services/operator/main.ts

import { createServer } from 'node:http';
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  KubeConfig,
  KubernetesObjectApi,
} from '@kubernetes/client-node';
import { loadOrExit } from '../../lib/common/config.ts';
import { openStores } from '../quota/stores/open-stores.ts';
import { loadOperatorConfig } from './config.ts';
import { LeaderElection } from './leader-election.ts';
import { createOperatorMetrics } from './metrics.ts';
import { Operator } from './operator.ts';
import { podPolicyReader } from './policy-readers.ts';

function log(msg: string, obj: object = {}): void {
  process.stdout.write(
    `${JSON.stringify({ time: new Date().toISOString(), service: 'operator', msg, ...obj })}\n`,
  );
}

const config = loadOrExit('nsfwdetector operator', loadOperatorConfig);

const kc = new KubeConfig();
kc.loadFromDefault();
const kube = {
  objects: KubernetesObjectApi.makeApiClient(kc),
  apps: kc.makeApiClient(AppsV1Api),
  custom: kc.makeApiClient(CustomObjectsApi),
  core: kc.makeApiClient(CoreV1Api),
};
const stores = await openStores(config, { clientName: 'nsfwdetector-operator', required: true });
const metrics = createOperatorMetrics();
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
        ? podPolicyReader(kc.makeApiClient(DiscoveryV1Api), config.namespace, config.policyReaders)
        : undefined,
    log,
  });
// Terms one after the other: a new one starts only once the previous one has stopped.
let operator: Operator | undefined;
let terms: Promise<void> = Promise.resolve();
const stopTerm = async () => {
  const current = operator;
  operator = undefined;
  await current?.stop();
};

let shuttingDown = false;
async function shutdown(code: number): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  log('shutting down', { code });
  await election.stop();
  terms = terms.then(stopTerm);
  await terms;
  await stores.close();
  server.close();
  process.exit(code);
}

const election = new LeaderElection({
  api: kc.makeApiClient(CoordinationV1Api),
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
      if (shuttingDown || !election.leading) return;
      operator = newOperator();
      await operator.start().catch((err) => {
        log('operator failed to start', { err: (err as Error).message });
        void shutdown(1);
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

const server = createServer(async (req, res) => {
  if (req.url === '/metrics') {
    res.setHeader('content-type', metrics.registry.contentType);
    res.end(await metrics.registry.metrics());
  } else if (req.url === '/healthz') {
    res.end('ok');
  } else {
    res.statusCode = 404;
    res.end();
  }
});
server.listen(config.metricsPort, config.host, () => {
  log('listening', { port: (server.address() as { port: number }).port, identity: config.identity });
  election.start();
});

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
