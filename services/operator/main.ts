// The operator's process: configuration (services/common/config.ts for Redis, plus OPERATOR_* below),
// the kubeconfig (KUBECONFIG or in-cluster), Lease leader election, metrics on OPERATOR_METRICS_PORT,
// graceful shutdown on SIGTERM/SIGINT (release the Lease, finish reconciles in progress). Each
// leadership term runs a fresh Operator (informers, queues); a lost Lease stops it and the process
// stays a candidate.
//   node --import tsx services/operator/main.ts

import { createServer } from 'node:http';
import { hostname } from 'node:os';
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  KubeConfig,
  KubernetesObjectApi,
} from '@kubernetes/client-node';
import { ConfigError, intVar, loadConfig, optionalVar, stringVar } from '../common/config.ts';
import { openStores } from '../quota/stores/open-stores.ts';
import { LeaderElection } from './leader-election.ts';
import { createOperatorMetrics } from './metrics.ts';
import { Operator } from './operator.ts';
import { type PolicyReader, parsePolicyReaders, podPolicyReader } from './policy-readers.ts';

function log(msg: string, obj: object = {}): void {
  process.stdout.write(
    `${JSON.stringify({ time: new Date().toISOString(), service: 'operator', msg, ...obj })}\n`,
  );
}

let settings: {
  namespace: string;
  identity: string;
  leaseSeconds: number;
  retryMs: number;
  resyncMs: number;
  metricsPort: number;
  detectDeployment: string | undefined;
  policyReaders: PolicyReader[];
};
let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig(process.env);
  if (!config.redisTarget)
    throw new ConfigError(
      'REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES is required: the operator writes accounts and keys to Redis',
    );
  settings = {
    namespace: stringVar(process.env, 'OPERATOR_NAMESPACE', 'default'),
    identity: stringVar(process.env, 'OPERATOR_IDENTITY', `${hostname()}-${process.pid}`),
    leaseSeconds: intVar(process.env, 'OPERATOR_LEASE_SECONDS', 15, 1, 600),
    retryMs: intVar(process.env, 'OPERATOR_RETRY_MS', 2_000, 100, 60_000),
    resyncMs: intVar(process.env, 'OPERATOR_RESYNC_MS', 300_000, 1_000),
    metricsPort: intVar(process.env, 'OPERATOR_METRICS_PORT', 9090, 0, 65_535),
    detectDeployment: optionalVar(process.env, 'OPERATOR_DETECT_DEPLOYMENT'),
    policyReaders: [],
  };
  try {
    settings.policyReaders = parsePolicyReaders(process.env.OPERATOR_POLICY_READERS);
  } catch (err) {
    throw new ConfigError(`OPERATOR_POLICY_READERS: ${(err as Error).message}`);
  }
  if (settings.retryMs * 3 >= settings.leaseSeconds * 1000 * 2)
    throw new ConfigError(
      'OPERATOR_RETRY_MS must be below two thirds of OPERATOR_LEASE_SECONDS (the renew deadline): a leader renews several times before it steps down',
    );
  const name = settings.detectDeployment;
  if (name !== undefined && !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(name))
    throw new ConfigError(
      `OPERATOR_DETECT_DEPLOYMENT must be a Deployment name, got ${JSON.stringify(name)}`,
    );
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.message}\n`);
    process.exit(1);
  }
  throw err;
}

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
    namespace: settings.namespace,
    store: stores.accountStore,
    metrics,
    resyncMs: settings.resyncMs,
    detectDeployment: settings.detectDeployment,
    podPolicies:
      settings.policyReaders.length > 0
        ? podPolicyReader(kc.makeApiClient(DiscoveryV1Api), settings.namespace, settings.policyReaders)
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
  namespace: settings.namespace,
  name: 'nsfwdetector-operator',
  identity: settings.identity,
  leaseDurationSeconds: settings.leaseSeconds,
  // client-go's proportions (15 s Lease, 10 s deadline).
  renewDeadlineMs: Math.round((settings.leaseSeconds * 1000 * 2) / 3),
  retryPeriodMs: settings.retryMs,
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
server.listen(settings.metricsPort, config.host, () => {
  log('listening', { port: (server.address() as { port: number }).port, identity: settings.identity });
  election.start();
});

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
