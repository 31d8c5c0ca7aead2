// The chart on three nodes (npm run kube:up -- --nodes 3), the last phase of the node suite (node.test.ts
// brings the three nodes up once for all its phases, and down after this one): node 1 is this machine's
// host processes, nodes 2 and 3 run in network namespaces of their own (tools/kube-node/nodes.sh). Checked:
// every node Ready with its own address and pod subnet; detect's and the gateway's pods on different
// nodes, read from `kubectl get pods -o wide`; the PodDisruptionBudget in force; NetworkPolicies enforced
// between pods on different nodes; a node drained under steady key and anonymous k6 traffic without a
// failed request and with the account's count equal to its 200s, then uncordoned and the pods spread
// again; a detect and a gateway pod deleted gracefully under the same traffic; Redis failovers; last a
// node lost with a detect pod, the Redis primary and a CoreDNS pod on it (so this phase runs last: the
// node suite's kube:down follows). Every figure is printed on a
// line starting `kube-nodes:`.

import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, expect, it } from 'vitest';
import { runMixed } from '../../loadtests/mixed.ts';
import { soak } from '../../loadtests/soak-sampler.ts';
import { adminCliArgs } from '../support/chart-kubectl.ts';
import { startCpuHog } from '../support/cpu-hog.ts';
import {
  describeWithKubeNode,
  installChart,
  type KubeNodeFacts,
  kubectl,
  kubectlJson,
  lastLine,
  NODE_UP_TIMEOUT,
  type NodeImages,
  probe,
  pushImages,
  runNodeScript,
  startProbe,
  upgradeOnNode,
} from '../support/kube-node.ts';
import { LISTED_PHOTO, listedCopyHash } from '../support/listed-photo.ts';
import { REPO } from '../support/paths.ts';
import { post } from '../support/stack-client.ts';
import { STACK_TOOLS } from '../support/stack-tools.ts';
import { type Counts, expectOnly, startLoad, zeroCounts } from '../support/steady-load.ts';
import { COUNTED_PHASE_MS, withinOneUtcDay } from '../support/utc-day.ts';

/** The nodes the node suite brings up (node.test.ts): this phase needs three. */
export const NODES = 3;
const VALUES = [join(REPO, 'test/kube/values-suite.yaml'), join(REPO, 'test/kube/values-nodes.yaml')];
const release = 'nsfwdetector';
const ns = 'nsfwdetector';
const email = 'nodes@example.com';
// redis.sentinel.masterName's default: the name the sentinels monitor.
const MASTER = 'nsfwdetector';
// The soak's length: 3 minutes in CI, SOAK_SECONDS=1800 for the 30-minute one of docs/multi-node.md.
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 180);
// Samples before this are the detect pods warming up (the model's first inferences, V8's heap growing to
// its working size): not in the slope.
const SOAK_WARMUP_SECONDS = SOAK_SECONDS >= 900 ? 300 : 60;

const log = (line: string) => console.log(`kube-nodes: ${line}`);

/** detect's port in its pods (the chart's envoy.upstreams.detect.port). */
const DETECT_PORT = 8080;

/** A HashList's status (charts/nsfwdetector/crds/hashlists.yaml). */
interface HashListStatus {
  hashes?: number;
  replicas?: number;
  replicasInForce?: number;
}
const seconds = (since: number) => Math.round((performance.now() - since) / 100) / 10;

/** A pod as `kubectl get pods -o wide` shows it. */
interface WidePod {
  name: string;
  ready: string;
  status: string;
  ip: string;
  node: string;
}

/** The three-node phase of the node suite, on the nodes `nodeFacts` describes (up with NODES nodes). */
export function threeNodesOnTheCluster(nodeFacts: () => KubeNodeFacts): void {
  describeWithKubeNode(`the chart on ${NODES} nodes`, () => threeNodeChecks(nodeFacts), [
    STACK_TOOLS.helm,
    STACK_TOOLS.k6,
  ]);
}

function threeNodeChecks(nodeFacts: () => KubeNodeFacts): void {
  let facts: KubeNodeFacts;
  let images: NodeImages;
  let gateway: string;
  let key: string;
  let revokedKey: string;
  /** A free account's key per Redis failover check, its day limit untouched until then. */
  const limitedKeys: Record<'pod' | 'node', string> = { pod: '', node: '' };
  const limitedEmail = (which: string) => `limit-${which}@example.com`;
  const k = (...args: string[]) => kubectl(facts, args);
  const kj = (...args: string[]) => kubectlJson(facts, args);
  const admin = async (...args: string[]) => JSON.parse(await k('-n', ns, ...adminCliArgs(release, args)));
  const usedToday = async (): Promise<number> => (await admin('usage', email)).usage.day.used;

  /** The chart's pods of a component, from `kubectl get pods -o wide` (its NODE column). */
  const widePods = async (component: string): Promise<WidePod[]> => {
    const out = await k(
      '-n',
      ns,
      'get',
      'pods',
      '-o',
      'wide',
      '--no-headers',
      '-l',
      `app.kubernetes.io/component=${component}`,
    );
    return out
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        // NAME READY STATUS RESTARTS AGE IP NODE NOMINATED-NODE READINESS-GATES; RESTARTS may be
        // several words ("1 (2m ago)"): IP and NODE are counted from the end.
        const cells = line.trim().split(/\s+/);
        const [name, ready, status] = cells as string[];
        return { name, ready, status, ip: cells.at(-4), node: cells.at(-3) } as WidePod;
      })
      .filter((p) => p.status === 'Running');
  };
  const nodesOf = async (component: string) => (await widePods(component)).map((p) => p.node);
  /**
   * Resolves once keyed requests are answered 200 twenty times in a row after a Redis failover: each
   * gateway pod's quota service finds the demoted primary on its first write (READONLY, that request a
   * 503/5001) and reconnects; twenty in a row through the Service reach both pods but once in 500 000.
   */
  const keyedAnswered = async (what: string) => {
    const since = performance.now();
    let inARow = 0;
    while (inARow < 20) {
      const answer = await post(gateway, '/api/open/detect', { headers: { authorization: `Bearer ${key}` } });
      inARow = answer.status === 200 ? inARow + 1 : 0;
      if (performance.now() - since > 120_000)
        throw new Error(`no 200 within 120 s of ${what}: ${answer.status}`);
      if (inARow === 0) await sleep(500);
    }
    return seconds(since);
  };
  const sentinelCli = (pod: string, ...args: string[]) =>
    k(
      '-n',
      ns,
      'exec',
      pod,
      '-c',
      'sentinel',
      '--request-timeout=5s',
      '--',
      'redis-cli',
      '-p',
      '26379',
      '--raw',
      ...args,
    );
  /** redis-cli in a Redis pod's data node container. */
  const redisCli = (pod: string, ...args: string[]) =>
    k('-n', ns, 'exec', pod, '-c', 'redis', '--', 'redis-cli', ...args);
  let podByAddress: Map<string, string> | undefined;
  /**
   * The Redis pod of each address the sentinels give: the ClusterIP of the pod's own Service (stable:
   * read once).
   */
  const redisPodsByAddress = async (): Promise<Map<string, string>> => {
    podByAddress ??= new Map(
      (
        await kj(
          '-n',
          ns,
          'get',
          'services',
          '-l',
          `app.kubernetes.io/component=redis,app.kubernetes.io/instance=${release}`,
        )
      ).items
        .filter(
          (s: { spec: { selector?: Record<string, string> } }) =>
            s.spec.selector?.['statefulset.kubernetes.io/pod-name'],
        )
        .map((s: { spec: { clusterIP: string; selector: Record<string, string> } }) => [
          s.spec.clusterIP,
          s.spec.selector['statefulset.kubernetes.io/pod-name'],
        ]),
    );
    return podByAddress;
  };
  /**
   * The Redis primary's pod, as the sentinels say (asked in the sentinel container of a running Redis
   * pod not on `avoid`: a lost node's pods answer no exec).
   */
  const primaryPod = async (avoid?: string): Promise<WidePod> => {
    const pods = await widePods('redis');
    const podOf = await redisPodsByAddress();
    for (const p of pods.filter((q) => q.node !== avoid)) {
      const out = await sentinelCli(p.name, 'sentinel', 'get-master-addr-by-name', MASTER).catch(() => '');
      const pod = pods.find((q) => q.name === podOf.get(out.trim().split('\n')[0] ?? ''));
      if (pod) return pod;
    }
    throw new Error(`no sentinel named a running Redis pod as the primary (${JSON.stringify(pods)})`);
  };
  /**
   * Waits until the primary has both replicas online (synced, receiving its stream): before that, writes
   * it acknowledges live on it alone (an account's WAIT fails; a counter lost with it is not the
   * failover's but this gap's).
   */
  const replicasOnline = async (after: string) => {
    const started = performance.now();
    for (;;) {
      const primary = await primaryPod().catch(() => undefined);
      const info = primary ? await redisCli(primary.name, 'info', 'replication').catch(() => '') : '';
      if ((info.match(/^slave\d+:.*state=online/gm) ?? []).length >= 2) return;
      if (performance.now() - started > 120_000)
        throw new Error(`no primary with two replicas online 120 s after ${after}: ${info}`);
      await sleep(1_000);
    }
  };
  /**
   * A sentinel failover to the Redis pod on `node` (the other replicas made unpromotable for it with
   * replica-priority 0), then until keyed requests are answered again; logged with `why`.
   */
  const failoverTo = async (node: string, why: string) => {
    const before = await primaryPod();
    const pods = await widePods('redis');
    const target = pods.find((p) => p.node === node);
    if (!target) throw new Error(`no Redis pod on ${node}: ${JSON.stringify(pods)}`);
    if (before.name === target.name) return;
    const others = pods.filter((p) => p.name !== target.name && p.name !== before.name);
    const priority = (pod: string, n: number) =>
      redisCli(pod, 'config', 'set', 'replica-priority', String(n));
    const started = performance.now();
    for (const p of others) await priority(p.name, 0);
    try {
      await sentinelCli(before.name, 'sentinel', 'failover', MASTER);
      while ((await primaryPod()).name !== target.name) {
        if (performance.now() - started > 60_000)
          throw new Error(`the primary did not move to ${target.name} within 60 s`);
        await sleep(500);
      }
      // The sentinels turn the former primary into a replica a little later; until then it still says
      // master (a drain evicting it then would start its preStop handover).
      const role = () => redisCli(before.name, '--raw', 'role').catch(() => '');
      while ((await role()).split('\n')[0] !== 'slave') {
        if (performance.now() - started > 60_000)
          throw new Error(`${before.name} still a primary after 60 s`);
        await sleep(500);
      }
    } finally {
      for (const p of others) await priority(p.name, 100);
    }
    const promoted = seconds(started);
    await replicasOnline('a sentinel failover');
    const answered = await keyedAnswered('a sentinel failover');
    log(
      `${why}: SENTINEL FAILOVER from ${before.name} on ${before.node} to ${target.name} on ${node}: promoted in ${promoted} s; keyed requests answered 200 again ${answered} s after`,
    );
  };
  /** Accounts, their keys (revocations included) as the admin CLI lists them: what a failover must keep. */
  const quotaData = async () => {
    const accounts = (await admin('list-accounts')).accounts as { id: string; email: string; tier: string }[];
    const keys = await Promise.all(
      accounts.map(async (a) =>
        (
          (await admin('list-keys', a.email)).keys as { id: string; name: string; revokedAt: string | null }[]
        ).map((k) => ({ id: k.id, name: k.name, revokedAt: k.revokedAt })),
      ),
    );
    return accounts
      .map((a, i) => ({ id: a.id, email: a.email, tier: a.tier, keys: keys[i] }))
      .sort((a, b) => a.id.localeCompare(b.id));
  };
  /** The status a detect with the revoked key is answered. */
  const revokedStatus = async () =>
    (await post(gateway, '/api/open/detect', { headers: { authorization: `Bearer ${revokedKey}` } })).status;
  /**
   * A Redis failover check's start: what must survive it (accounts, keys, the revocation), the key's day
   * count, and steady keyed, anonymous and free-account traffic (the free account's 2 a second cross its
   * day limit about 50 s in: a counter lost in the failover shows as 200s beyond it).
   */
  const startFailoverCheck = async (which: 'pod' | 'node') => {
    const dataBefore = await quotaData();
    const revokedBefore = await revokedStatus();
    const dayLimit = (await admin('usage', limitedEmail(which))).usage.day.limit as number;
    await withinOneUtcDay(COUNTED_PHASE_MS, log);
    const usedBefore = await usedToday();
    const keyedLoad = startLoad(gateway, 3, key, { timeline: true });
    const anonymousLoad = startLoad(gateway, 2, undefined, { timeline: true });
    const limitedLoad = startLoad(gateway, 2, limitedKeys[which], { timeline: true });
    return {
      dayLimit,
      /**
       * Stops the traffic: keyed, anonymous and free-account answers (times relative to `zero`), and
       * the three added up.
       */
      stop: async (zero: number | undefined) => {
        const [keyed, anonymous, limited] = await Promise.all([
          keyedLoad.stop(zero),
          anonymousLoad.stop(zero),
          limitedLoad.stop(zero),
        ]);
        const total = zeroCounts();
        for (const r of [keyed, anonymous, limited])
          for (const [o, n] of Object.entries(r.counts)) total[o as keyof Counts] += n;
        return { keyed, anonymous, limited, total };
      },
      /**
       * After the failover: accounts, keys and the revocation as before (checked), and how much the key's
       * day count grew (returned, printed against its 200s).
       */
      after: async (keyed200: number) => {
        await sleep(3_000);
        const charged = (await usedToday()) - usedBefore;
        log(`the key's day count grew by ${charged}; its 200s: ${keyed200}`);
        const dataAfter = await quotaData();
        const revokedAfter = await revokedStatus();
        log(
          `after the failover: accounts, keys and revocations ${JSON.stringify(dataAfter) === JSON.stringify(dataBefore) ? 'as before' : `CHANGED: before ${JSON.stringify(dataBefore)}, after ${JSON.stringify(dataAfter)}`}; the revoked key answered ${revokedBefore} before, ${revokedAfter} after`,
        );
        expect(dataAfter).toEqual(dataBefore);
        expect(revokedAfter).toBe(revokedBefore);
        expect(revokedAfter).toBe(401);
        return charged;
      },
    };
  };
  /**
   * The Redis figures of a failover under load: the window (first to last 503/5001, seconds from
   * `zero`), and the free account's 200s beyond its day limit (its traffic began under the limit and
   * crossed it: what a lost counter admits more).
   */
  const failoverFigures = (
    runs: { perSecond: Map<number, Counts> }[],
    zero: number,
    limited: Counts,
    dayLimit: number,
  ) => {
    const zeroSecond = Math.floor(zero / 1000);
    const with503 = runs
      .flatMap((r) => [...r.perSecond.entries()])
      .filter(([, c]) => c['503/5001'] > 0)
      .map(([second]) => second - zeroSecond)
      .sort((a, b) => a - b);
    const window =
      with503.length === 0 ? 'no 503/5001' : `503/5001 from t+${with503[0]} s to t+${with503.at(-1)} s`;
    // Measured only when the account met its limit (a 429) within the check.
    const overAdmitted = limited['429'] > 0 ? Math.max(0, limited['200'] - dayLimit) : undefined;
    const overAdmission =
      overAdmitted === undefined
        ? `its limit not met within the check (200 × ${limited['200']}): over-admission not measured`
        : `admitted beyond its limit: ${overAdmitted}`;
    return { window, overAdmitted, overAdmission };
  };

  /**
   * Runs `script` with node in a gateway pod's quota container, where Envoy's admin port (loopback) is
   * in reach: the Envoy image has no client for it.
   */
  const besideEnvoy = (pod: string, script: string) =>
    k('-n', ns, 'exec', pod, '-c', 'quota', '--', 'node', '-e', script);

  /**
   * Polls every gateway pod's Envoy (its admin port, from the quota container of the same pod) until
   * none balances onto `ip` any more (flagged unhealthy, or gone from the detect cluster); resolves with
   * ms since `since`, or undefined after 60 s.
   */
  const watchEjection = async (ip: string, since: number): Promise<number | undefined> => {
    const script =
      "fetch('http://127.0.0.1:9901/clusters').then((r) => r.text()).then((t) => console.log(t.split('\\n').filter((l) => l.startsWith('detect::') && l.includes('::health_flags::')).join('\\n')))";
    while (Date.now() - since < 60_000) {
      const flags = await Promise.all(
        (await widePods('gateway')).map((g) => besideEnvoy(g.name, script).catch(() => '')),
      );
      // An exec that failed, or an Envoy not listing detect's pods, tells nothing: asked again.
      if (flags.some((f) => !f.includes('detect::'))) {
        await sleep(500);
        continue;
      }
      const inUse = flags.some((f) =>
        f.split('\n').some((l) => l.startsWith(`detect::${ip}:`) && l.endsWith('::healthy')),
      );
      if (!inUse) return Date.now() - since;
      await sleep(500);
    }
    return undefined;
  };
  /**
   * Polls the sentinels off `lostNode` until they name a primary other than `old`: ms since `since`, or
   * undefined after 60 s.
   */
  const watchPromotion = async (
    old: string,
    lostNode: string,
    since: number,
  ): Promise<number | undefined> => {
    while (Date.now() - since < 60_000) {
      const now = await primaryPod(lostNode).catch(() => undefined);
      if (now && now.name !== old) return Date.now() - since;
      await sleep(500);
    }
    return undefined;
  };
  /**
   * The last `seconds` of every gateway pod's Envoy access log lines with a status other than 200 and
   * 429, and its quota container's warnings and errors: who answered a 503 (detect, ext_authz, Envoy).
   */
  const logGatewayFailures = async (seconds: number) => {
    for (const g of await widePods('gateway')) {
      const since = `--since=${seconds}s`;
      const envoy = (await k('-n', ns, 'logs', g.name, '-c', 'envoy', since).catch((e) => String(e)))
        .split('\n')
        // Its access log (JSON lines), not its own log (the OTLP exporter's 503s from the absent collector).
        .filter((l) => l.startsWith('{') && /"status":\s*"?(5\d\d|0)\b/.test(l));
      const quota = (await k('-n', ns, 'logs', g.name, '-c', 'quota', since).catch((e) => String(e)))
        .split('\n')
        .filter((l) => /"level":\s*[45]0/.test(l));
      if (envoy.length || quota.length) {
        // Why ext_authz failed, if it did: the edge's counters for its quota sidecar (connections that
        // timed out or failed to open, requests that timed out or lost their connection).
        const stats = envoy.some((l) => l.includes('ext_authz_error'))
          ? await besideEnvoy(
              g.name,
              "fetch('http://127.0.0.1:9901/stats?filter=cluster.quota.upstream_').then((r) => r.text()).then((t) => console.log(t.split('\\n').filter((l) => /cx_connect|cx_destroy|rq_timeout|rq_rx_reset|rq_pending/.test(l)).join('\\n')))",
            ).catch((e) => String(e))
          : '';
        log(
          `${g.name} (${g.node}), the last ${seconds} s:\n${[...envoy.slice(-8), ...quota.slice(-8)].map((l) => `  ${l.slice(0, 600)}`).join('\n')}${stats ? `\n  the edge's quota cluster: ${stats.trim().split('\n').join('; ')}` : ''}`,
        );
      }
    }
  };
  const ejectedAt = (ms: number | undefined) =>
    ms === undefined ? 'not within 60 s' : `at t+${(ms / 1000).toFixed(1)} s`;

  beforeAll(async () => {
    facts = nodeFacts();
    // Every node schedulable: the node suite's one-node phases ran with nodes 2 and 3 cordoned.
    const nodes = (await kj('get', 'nodes')).items.map(
      (n: { metadata: { name: string } }) => n.metadata.name,
    );
    expect(nodes).toHaveLength(NODES);
    await k('uncordon', ...nodes);
    images = await pushImages(facts);
    const started = performance.now();
    await installChart(facts, images, { release, namespace: ns, valuesFiles: VALUES });
    log(`helm install --wait on ${NODES} nodes: ${seconds(started)} s`);
    const svc = await kj('-n', ns, 'get', 'service', `${release}-gateway`);
    gateway = `http://${svc.spec.clusterIP}:${svc.spec.ports[0].port}`;
    // Ready pods are not yet replicas in sync: an account written before the primary has a replica
    // online fails its WAIT ("acknowledged by 0 of 1 replica(s)").
    const installed = performance.now();
    await replicasOnline('the install');
    log(`the Redis primary with two replicas online ${seconds(installed)} s after the install`);
    await admin('create-account', '--email', email, '--tier', 'pro');
    key = (await admin('issue-key', email, '--name', 'nodes')).secret;
    // What a Redis failover must keep: an account, its keys, a revocation.
    const revoked = await admin('issue-key', email, '--name', 'revoked');
    await admin('revoke-key', revoked.key.id);
    revokedKey = revoked.secret;
    for (const which of ['pod', 'node'] as const) {
      await admin('create-account', '--email', limitedEmail(which), '--tier', 'free');
      limitedKeys[which] = (await admin('issue-key', limitedEmail(which), '--name', 'limit')).secret;
    }
  }, NODE_UP_TIMEOUT);

  it('every node Ready, each with its own address and pod subnet; pods answer across nodes', async () => {
    const nodes = (await kj('get', 'nodes')).items;
    expect(nodes).toHaveLength(NODES);
    const seen = nodes.map(
      (n: {
        metadata: { name: string };
        spec: { podCIDR: string };
        status: {
          addresses: { type: string; address: string }[];
          conditions: { type: string; status: string }[];
        };
      }) => ({
        name: n.metadata.name,
        ip: n.status.addresses.find((a) => a.type === 'InternalIP')?.address,
        podCIDR: n.spec.podCIDR,
        ready: n.status.conditions.find((c) => c.type === 'Ready')?.status,
      }),
    );
    log(`nodes: ${JSON.stringify(seen)}`);
    for (const n of seen) expect(n.ready, n.name).toBe('True');
    expect(new Set(seen.map((n: { ip: string }) => n.ip)).size).toBe(NODES);
    expect(new Set(seen.map((n: { podCIDR: string }) => n.podCIDR)).size).toBe(NODES);
    // The gateway Service from the host: answered by pods on whichever node.
    const health = await fetch(`${gateway}/api/public/health`);
    expect(health.status).toBe(200);
  }, 120_000);

  it('detect and gateway pods on different nodes (kubectl get pods -o wide); the PodDisruptionBudgets in force', async () => {
    const detect = await nodesOf('detect');
    const gw = await nodesOf('gateway');
    log(`detect pods on ${JSON.stringify(detect)}; gateway pods on ${JSON.stringify(gw)}`);
    const redis = await nodesOf('redis');
    log(
      `redis (data node + sentinel) pods on ${JSON.stringify(redis)}; the primary ${(await primaryPod()).name}`,
    );
    expect(detect).toHaveLength(2);
    expect(new Set(redis).size).toBe(3);
    expect(new Set(detect).size).toBe(2);
    expect(gw).toHaveLength(2);
    expect(new Set(gw).size).toBe(2);
    const pdbs = (await kj('-n', ns, 'get', 'pdb')).items;
    log(
      `PodDisruptionBudgets: ${JSON.stringify(
        pdbs.map(
          (p: {
            metadata: { name: string };
            spec: unknown;
            status: { currentHealthy: number; desiredHealthy: number; disruptionsAllowed: number };
          }) => ({ name: p.metadata.name, spec: p.spec, status: p.status }),
        ),
      )}`,
    );
    // Two pods each (Redis: three), one of which may go at a time.
    for (const component of ['detect', 'gateway', 'redis']) {
      const pdb = pdbs.find(
        (p: { metadata: { name: string } }) => p.metadata.name === `${release}-${component}`,
      );
      expect(pdb, `the ${component} PodDisruptionBudget`).toBeDefined();
      expect(
        { healthy: pdb.status.currentHealthy, allowed: pdb.status.disruptionsAllowed },
        component,
      ).toEqual({
        healthy: component === 'redis' ? 3 : 2,
        allowed: 1,
      });
    }
  }, 120_000);

  it('NetworkPolicies across nodes: a pod on another node cannot reach detect; the gateway on another node can', async () => {
    const detect = (await widePods('detect'))[0] as WidePod;
    const gatewayElsewhere = (await widePods('gateway')).find((p) => p.node !== detect.node);
    expect(gatewayElsewhere, 'a gateway pod on a node without this detect pod').toBeDefined();
    const elsewhere = gatewayElsewhere?.node as string;
    await startProbe(facts, images, ns, elsewhere);
    try {
      const target = { detect: { host: detect.ip, port: 8080 } };
      const fromProbe = await probe(facts, ['-n', ns, 'probe'], target);
      const fromGateway = await probe(
        facts,
        ['-n', ns, gatewayElsewhere?.name as string, '-c', 'quota'],
        target,
      );
      log(
        `detect pod ${detect.name} on ${detect.node}: from a pod on ${elsewhere} ${fromProbe.detect}, from gateway pod ${gatewayElsewhere?.name} on ${elsewhere} ${fromGateway.detect}`,
      );
      expect({ fromProbe, fromGateway }).toEqual({
        fromProbe: { detect: 'closed' },
        fromGateway: { detect: 'open' },
      });
    } finally {
      await k('-n', ns, 'delete', 'pod', 'probe', '--wait=false');
    }
  }, 300_000);

  it(
    `a soak: ${SOAK_SECONDS} s of steady mixed traffic (six formats, key and anonymous), detect's RSS and heap sampled every 10 s: no restart, only 200 and 429`,
    async () => {
      const began = performance.now();
      const mixed = runMixed({
        baseUrl: gateway,
        keys: [key],
        rate: 4,
        duration: `${SOAK_SECONDS + 10}s`,
        onSecond: (line) => {
          // The seconds are many: only the unexpected answers are printed as they come.
          if (line.includes('unexpected answer')) log(`soak: ${line.trim()}`);
        },
      });
      const report = await soak({
        sampler: {
          kubectl: facts.kubectl,
          kubeconfig: facts.kubeconfig,
          namespace: ns,
          release,
          via: 'exec',
          port: 8080,
        },
        intervalS: 10,
        durationS: SOAK_SECONDS,
        warmupS: SOAK_WARMUP_SECONDS,
        onLine: (line) => log(`soak sample ${line.trim()}`),
      });
      const result = await mixed;
      log(
        `soak: ${seconds(began)} s; answers ${JSON.stringify(result.totals)} (sent ${result.sent}); by format ${JSON.stringify(result.byFormat)}; by authentication ${JSON.stringify(result.byAuth)}`,
      );
      for (const p of report.perPod)
        log(
          `soak: ${p.pod} after the ${SOAK_WARMUP_SECONDS} s warm-up (${p.samples} samples): RSS ${p.rssMiB[0].toFixed(1)} → ${p.rssMiB[1].toFixed(1)} MiB, slope ${p.rssSlopeMiBPerHour.toFixed(1)} MiB/h; heap ${p.heapMiB[0].toFixed(1)} → ${p.heapMiB[1].toFixed(1)} MiB, slope ${p.heapSlopeMiBPerHour.toFixed(1)} MiB/h; restarts ${p.restarts}`,
        );
      expect(result.exitCode, result.output.slice(-2000)).toBe(0);
      // Every format is valid and the pro tier's limits are out of the way (values-suite.yaml): a keyed
      // request is answered 200; an anonymous one 200, or 429 past the per-IP minute and day limits (every
      // anonymous request comes from this host's one address). Anything else is a failure.
      expect(Object.keys(result.totals).filter((o) => o !== '200' && o !== '429')).toEqual([]);
      expect(Object.keys(result.byAuth.key ?? {})).toEqual(['200']);
      expect(Object.keys(result.byFormat).sort()).toEqual(['bmp', 'gif', 'jpeg', 'png', 'tiff', 'webp']);
      // No restart and no replaced pod. The slope is printed, not bounded: over a 3-minute run it is the
      // noise of a garbage collector's sawtooth (tens of MiB/h either way), no trend; the 30-minute figures
      // are in docs/multi-node.md.
      expect(report.podsChanged, 'detect pods replaced during the soak').toBe(false);
      expect(report.perPod.map((p) => [p.pod, p.restarts])).toEqual(report.perPod.map((p) => [p.pod, 0]));
      expect(report.perPod).toHaveLength(2);
      for (const p of report.perPod) expect(p.samples, p.pod).toBeGreaterThan(2);
    },
    SOAK_SECONDS * 1000 + 300_000,
  );

  it('kubectl drain of a node holding a detect and a gateway pod under steady key and anonymous traffic, a CPU hog beside it: only 200 and 429, the count equal to the 200s', async () => {
    const detect = await nodesOf('detect');
    const gw = await nodesOf('gateway');
    const target = detect.find((n) => gw.includes(n)) as string;
    expect(target, 'a node holding a detect and a gateway pod').toBeDefined();
    // Evicting the Redis primary would be a failover under load (a window of 503/5001): the primary is
    // handed to a replica on another node first. Replicas and sentinels on the node are evicted as they
    // are (a PodDisruptionBudget lets one Redis pod go at a time).
    const primary = await primaryPod();
    if (primary.node === target)
      await failoverTo(
        (await widePods('redis')).find((p) => p.node !== target)?.node as string,
        `the primary on ${target}, to be drained`,
      );
    await withinOneUtcDay(COUNTED_PHASE_MS, log);
    const usedBefore = await usedToday();
    // As a CI machine busy with other work: every process of the cluster gets about half the CPU.
    const hog = startCpuHog();
    log(`CPU hog: ${hog.processes} × yes at nice 0 during the drain`);
    const keyed = startLoad(gateway, 3, key, { timeline: true });
    const anonymous = startLoad(gateway, 2, undefined, { timeline: true });
    let keyedResult: Awaited<ReturnType<typeof keyed.stop>>;
    let anonymousResult: Awaited<ReturnType<typeof anonymous.stop>>;
    const started = performance.now();
    const drainAt = Date.now() + 5_000;
    try {
      await sleep(5_000);
      const out = await k('drain', target, '--ignore-daemonsets', '--delete-emptydir-data', '--timeout=300s');
      log(`kubectl drain ${target} under load: ${seconds(started) - 5} s\n${out.trim()}`);
      for (const d of ['detect', 'gateway'])
        await k('-n', ns, 'rollout', 'status', `deployment/${release}-${d}`, '--timeout=300s');
      await sleep(5_000);
    } finally {
      [keyedResult, anonymousResult] = await Promise.all([keyed.stop(drainAt), anonymous.stop(drainAt)]);
      await hog.stop();
      // Whatever the checks below find, the next ones get the node back.
      await k('uncordon', target);
    }
    log(
      `answers during the drain: key ${JSON.stringify(keyedResult.counts)}, anonymous ${JSON.stringify(anonymousResult.counts)}; cut by stopping k6: ${keyedResult.unanswered} + ${anonymousResult.unanswered}`,
    );
    log(
      `answers by second (t+0: kubectl drain):\n${timeline([keyedResult, anonymousResult], drainAt).lines}`,
    );
    log(
      `after the drain: detect on ${JSON.stringify(await nodesOf('detect'))}, gateway on ${JSON.stringify(await nodesOf('gateway'))}`,
    );
    await logGatewayFailures(90);
    await sleep(3_000);
    const charged = (await usedToday()) - usedBefore;
    log(`the key's day count grew by ${charged}; its 200s: ${keyedResult.counts['200']}`);

    // The cluster is spread again before the answers are judged, so that a failed check here leaves the
    // next ones (they find pods by node) no crowded node. Uncordoned, the node takes pods again; running
    // pods do not move back by themselves (nothing in Kubernetes reschedules a running pod): a rollout
    // restart spreads them over the three nodes again.
    const restarted = performance.now();
    for (const d of ['detect', 'gateway'])
      await k('-n', ns, 'rollout', 'restart', `deployment/${release}-${d}`);
    for (const d of ['detect', 'gateway'])
      await k('-n', ns, 'rollout', 'status', `deployment/${release}-${d}`, '--timeout=300s');
    const detectAfter = await nodesOf('detect');
    const gatewayAfter = await nodesOf('gateway');
    log(
      `uncordoned ${target}; rollout restart: detect on ${JSON.stringify(detectAfter)}, gateway on ${JSON.stringify(gatewayAfter)} (${seconds(restarted)} s)`,
    );
    expect(new Set(detectAfter).size).toBe(2);
    expect(new Set(gatewayAfter).size).toBe(2);

    // The drained node's Redis pod was rescheduled beside another (the spread counts only schedulable
    // nodes); a StatefulSet pod is not restarted by a rollout but deleted: the replica sharing a node
    // goes back to the uncordoned one, and its replication is online again before the next check.
    const redisPods = await widePods('redis');
    const primaryNow = await primaryPod();
    const crowded = redisPods.find(
      (p) => p.name !== primaryNow.name && redisPods.some((q) => q !== p && q.node === p.node),
    );
    if (crowded) {
      await k('-n', ns, 'delete', 'pod', crowded.name, '--wait=true');
      await k('-n', ns, 'rollout', 'status', `statefulset/${release}-redis`, '--timeout=300s');
      await replicasOnline(`${crowded.name} deleted`);
    }
    const redisAfter = (await widePods('redis')).map((p) => p.node);
    log(
      `Redis on ${JSON.stringify(redisAfter)}${crowded ? ` (${crowded.name} moved off ${crowded.node})` : ''}`,
    );
    expect(new Set(redisAfter).size).toBe(3);

    expectOnly(keyedResult, ['200', '429']);
    expectOnly(anonymousResult, ['200', '429']);
    expect(keyedResult.counts['200']).toBeGreaterThan(0);
    expect(charged).toBeGreaterThanOrEqual(keyedResult.counts['200']);
    expect(charged).toBeLessThanOrEqual(keyedResult.counts['200'] + keyedResult.unanswered);
  }, 1_200_000);

  it('a detect pod and a gateway pod deleted gracefully under steady traffic, a CPU hog beside them: no failed request', async () => {
    await withinOneUtcDay(COUNTED_PHASE_MS, log);
    const usedBefore = await usedToday();
    const hog = startCpuHog();
    log(`CPU hog: ${hog.processes} × yes at nice 0 during the deletions`);
    const deletedAt = Date.now() + 5_000;
    const keyed = startLoad(gateway, 3, key, { timeline: true });
    const anonymous = startLoad(gateway, 2, undefined, { timeline: true });
    let keyedResult: Awaited<ReturnType<typeof keyed.stop>>;
    let anonymousResult: Awaited<ReturnType<typeof anonymous.stop>>;
    try {
      await sleep(5_000);
      for (const component of ['detect', 'gateway']) {
        const pod = (await widePods(component))[0] as WidePod;
        await k('-n', ns, 'delete', 'pod', pod.name, '--wait=false');
        log(`deleted ${component} pod ${pod.name} on ${pod.node}`);
        await k('-n', ns, 'rollout', 'status', `deployment/${release}-${component}`, '--timeout=300s');
        await sleep(10_000);
      }
    } finally {
      [keyedResult, anonymousResult] = await Promise.all([keyed.stop(deletedAt), anonymous.stop(deletedAt)]);
      await hog.stop();
    }
    log(
      `answers while a detect and a gateway pod were deleted: key ${JSON.stringify(keyedResult.counts)}, anonymous ${JSON.stringify(anonymousResult.counts)}`,
    );
    log(
      `answers by second (t+0: the first deletion):\n${timeline([keyedResult, anonymousResult], deletedAt).lines}`,
    );
    await logGatewayFailures(60);
    expectOnly(keyedResult, ['200', '429']);
    expectOnly(anonymousResult, ['200', '429']);
    await sleep(3_000);
    const charged = (await usedToday()) - usedBefore;
    expect(charged).toBeGreaterThanOrEqual(keyedResult.counts['200']);
    expect(charged).toBeLessThanOrEqual(keyedResult.counts['200'] + keyedResult.unanswered);
  }, 900_000);

  it("redis.architecture=sentinel: the primary's pod deleted under steady key and anonymous traffic: the failover window, uncharged 503s, the over-admission, accounts, keys and revocations kept", async () => {
    const primary = await primaryPod();
    const check = await startFailoverCheck('pod');
    let result: Awaited<ReturnType<typeof check.stop>>;
    let deletedAt = 0;
    let promotedMs: number | undefined;
    let backMs: number | undefined;
    try {
      await sleep(10_000);
      deletedAt = Date.now();
      await k('-n', ns, 'delete', 'pod', primary.name, '--wait=false');
      log(`deleted the Redis primary's pod ${primary.name} on ${primary.node}`);
      while (Date.now() - deletedAt < 120_000) {
        const now = await primaryPod().catch(() => undefined);
        if (now && now.name !== primary.name) {
          promotedMs = Date.now() - deletedAt;
          break;
        }
        await sleep(500);
      }
      await k('-n', ns, 'rollout', 'status', `statefulset/${release}-redis`, '--timeout=300s');
      backMs = Date.now() - deletedAt;
      // Long enough for the free account to cross its limit.
      await sleep(Math.max(10_000, 70_000 - (Date.now() - deletedAt)));
    } finally {
      result = await check.stop(deletedAt || undefined);
    }
    const { keyed: keyedResult, anonymous: anonymousResult, limited: limitedResult, total } = result;
    const dayLimit = check.dayLimit;
    const runs = [keyedResult, anonymousResult, limitedResult];
    log(`answers by second (t+0: the primary's pod deleted):\n${timeline(runs, deletedAt).lines}`);
    const figures = failoverFigures(runs, deletedAt, limitedResult.counts, dayLimit);
    log(
      `Redis primary's pod deleted: answers key ${JSON.stringify(keyedResult.counts)}, anonymous ${JSON.stringify(anonymousResult.counts)}, free account ${JSON.stringify(limitedResult.counts)}; ${figures.window}; a replica promoted ${promotedMs === undefined ? 'not within 120 s' : `at t+${(promotedMs / 1000).toFixed(1)} s`} (${(await primaryPod()).name}), the deleted pod back Ready ${backMs === undefined ? 'not' : `at t+${(backMs / 1000).toFixed(1)} s`}; the free account (day limit ${dayLimit}): ${figures.overAdmission}`,
    );
    const charged = await check.after(keyedResult.counts['200']);
    expect(promotedMs, 'a replica promoted').toBeDefined();
    // During the failover the quota decisions are 503/5001 (uncharged); nothing else.
    expectOnly({ counts: total, unexpected: runs.flatMap((r) => r.unexpected) }, ['200', '429', '503/5001']);
    expect(charged, 'no 503 charged').toBeLessThanOrEqual(keyedResult.counts['200'] + keyedResult.unanswered);
    // A graceful stop of the primary hands its last writes to the replicas before it exits: nothing the
    // key was charged is lost, and the free account is admitted no more than its limit.
    expect(charged).toBeGreaterThanOrEqual(keyedResult.counts['200']);
    expect(figures.overAdmitted).toBe(0);
  }, 900_000);

  it('a HashList resource applied: every detect replica matches within 10 s; deleted: none does', async () => {
    // The operator on and PDQ hashing on for this check only (the other checks' figures are without).
    const upgrade = async (operator: boolean) => {
      const started = performance.now();
      await upgradeOnNode(facts, images, release, ns, [
        `operator.enabled=${operator}`,
        `config.pdqHashes=${operator ? 'on' : 'off'}`,
      ]);
      log(`helm upgrade operator.enabled=${operator}: ${seconds(started)} s`);
    };
    const status = async () =>
      ((await kj('-n', ns, 'get', 'hashlist', 'known-bad')) as { status?: HashListStatus }).status ?? {};
    /** What every detect pod holds, asked from the operator's pod (the NetworkPolicy lets it reach detect). */
    const held = async () => {
      const ips = (await widePods('detect')).map((p) => p.ip);
      const script = `Promise.all(${JSON.stringify(ips)}.map((ip) => fetch('http://' + ip + ':${DETECT_PORT}/internal/hash-lists').then((r) => r.json()))).then((a) => console.log(JSON.stringify(a.map((b) => b.data.lists.map((l) => l.name + ':' + l.hashes)))))`;
      return JSON.parse(
        lastLine(await k('-n', ns, 'exec', `deploy/${release}-operator`, '--', 'node', '-e', script)),
      ) as string[][];
    };
    const matched = async (n: number) => {
      let count = 0;
      for (let i = 0; i < n; i++) {
        const a = await post(gateway, '/api/open/detect', {
          headers: { authorization: `Bearer ${key}` },
          body: LISTED_PHOTO,
        });
        expect(a.status).toBe(200);
        if (a.body.data.matches.length > 0) count++;
      }
      return count;
    };
    await upgrade(true);
    try {
      const detects = await widePods('detect');
      expect(detects).toHaveLength(2);
      const lines = [`# known-bad, from a re-encoded, resized copy`, await listedCopyHash()];
      await k(
        '-n',
        ns,
        'create',
        'secret',
        'generic',
        'known-bad-v1',
        `--from-literal=hashes=${lines.join('\n')}`,
      );
      const applied = performance.now();
      await k('-n', ns, 'apply', '-f', join(REPO, 'charts/nsfwdetector/examples/hashlist.yaml'));
      // In force on every ready detect replica: the operator asked each (GET /internal/hash-lists).
      await k('-n', ns, 'wait', '--for=condition=Ready', 'hashlist/known-bad', '--timeout=10s');
      const inForce = seconds(applied);
      expect(await status()).toMatchObject({ hashes: 1, replicas: 2, replicasInForce: 2 });
      expect(await held()).toEqual([['known-bad:1'], ['known-bad:1']]);
      log(`HashList Ready (in force on both detect pods, on two nodes) ${inForce} s after kubectl apply`);
      // Envoy spreads the requests over both detect pods: every answer matches.
      expect(await matched(10)).toBe(10);

      const deleted = performance.now();
      await k('-n', ns, 'delete', 'hashlist', 'known-bad');
      let gone = false;
      while (!gone && performance.now() - deleted < 10_000) {
        gone = (await held()).every((lists) => lists.length === 0);
        if (!gone) await sleep(250);
      }
      expect(gone, 'the list gone from every detect pod within 10 s').toBe(true);
      log(`HashList deleted: gone from both detect pods ${seconds(deleted)} s after kubectl delete`);
      expect(await matched(10)).toBe(0);
    } finally {
      await k('-n', ns, 'delete', 'secret', 'known-bad-v1', '--ignore-not-found');
      await upgrade(false);
    }
  }, 1_800_000);

  it('a node lost under steady traffic (link cut, kubelet, runtime and pods killed) with a detect pod, the Redis primary and a CoreDNS pod: a replica promoted within 20 s, nothing over-admitted; what clients see, second by second, until full capacity', async () => {
    const detect = await widePods('detect');
    const gw = await nodesOf('gateway');
    // A node other than node 1 (the control plane's host) holding a detect pod and no gateway pod: the
    // gateway Service is a ClusterIP, and kube-proxy keeps sending a lost gateway pod its share of new
    // connections until the node controller marks the node's pods not ready (40 s and more), which no
    // setting of the chart shortens (a load balancer's health checks in front of the gateway pods would).
    // So this check is about a lost detect pod; a gateway pod there is moved first (a graceful deletion,
    // which costs nothing: the check above).
    // The node lost also holds the Redis primary (handed to the Redis pod there by a sentinel failover
    // when it is elsewhere): the quota store's failover and detect's under the same cut.
    const candidates = detect.filter((p) => p.node !== facts.nodeName);
    expect(candidates.length, 'a detect pod on node 2 or 3').toBeGreaterThan(0);
    const primaryBefore = await primaryPod();
    const lost = (candidates.find((p) => p.node === primaryBefore.node && !gw.includes(p.node)) ??
      candidates.find((p) => !gw.includes(p.node)) ??
      candidates[0]) as WidePod;
    const lostNumber = Number(lost.node.split('-').at(-1));
    if (gw.includes(lost.node)) {
      await k('cordon', lost.node);
      try {
        for (const pod of (await widePods('gateway')).filter((p) => p.node === lost.node))
          await k('-n', ns, 'delete', 'pod', pod.name);
        await k('-n', ns, 'rollout', 'status', `deployment/${release}-gateway`, '--timeout=300s');
      } finally {
        await k('uncordon', lost.node);
      }
      log(`gateway pod moved off ${lost.node} first: gateway on ${JSON.stringify(await nodesOf('gateway'))}`);
    }
    await failoverTo(lost.node, `the primary moved to ${lost.node}, to be lost with its detect pod`);
    // And a CoreDNS pod (moved there when none is): it stays in the cluster DNS Service until the node
    // controller acts (40 s and more), and the lookups kube-proxy sends it go unanswered. Nothing of the
    // Redis failover resolves a name (the pods and the quota services find each other by their Services'
    // ClusterIPs), so it must not matter.
    const dnsPods = async () =>
      (await kj('-n', 'kube-system', 'get', 'pods', '-l', 'k8s-app=kube-dns')).items.filter(
        (p: { metadata: { deletionTimestamp?: string } }) => !p.metadata.deletionTimestamp,
      ) as { metadata: { name: string }; spec: { nodeName: string } }[];
    if (!(await dnsPods()).some((p) => p.spec.nodeName === lost.node)) {
      const others = (await kj('get', 'nodes')).items
        .map((n: { metadata: { name: string } }) => n.metadata.name)
        .filter((n: string) => n !== lost.node);
      await k('cordon', ...others);
      try {
        const moved = (await dnsPods())[0];
        if (moved) await k('-n', 'kube-system', 'delete', 'pod', moved.metadata.name);
        await k('-n', 'kube-system', 'rollout', 'status', 'deployment/coredns', '--timeout=300s');
      } finally {
        await k('uncordon', ...others);
      }
    }
    const dnsNodes = (await dnsPods()).map((p) => p.spec.nodeName);
    log(`CoreDNS pods on ${JSON.stringify(dnsNodes)}`);
    expect(dnsNodes, 'a CoreDNS pod on the node to be lost').toContain(lost.node);
    const primary = await primaryPod();
    log(`losing ${lost.node}: detect pod ${lost.name}, the Redis primary ${primary.name}, a CoreDNS pod`);
    const check = await startFailoverCheck('node');
    let result: Awaited<ReturnType<typeof check.stop>>;
    let cutAt = 0;
    let fullAt: number | undefined;
    let ejected: Promise<number | undefined> = Promise.resolve(undefined);
    let promoted: Promise<number | undefined> = Promise.resolve(undefined);
    try {
      await sleep(10_000);
      const out = await runNodeScript('lose-node.sh', {}, [String(lostNumber)]);
      cutAt = Number(lastLine(out));
      ejected = watchEjection(lost.ip, cutAt);
      promoted = watchPromotion(primary.name, lost.node, cutAt);
      // Full capacity: two detect pods Ready again, neither on the lost node.
      const deadline = Date.now() + 420_000;
      while (Date.now() < deadline) {
        const ready = (
          await kj('-n', ns, 'get', 'pods', '-l', 'app.kubernetes.io/component=detect')
        ).items.filter(
          (p: {
            spec: { nodeName: string };
            metadata: { deletionTimestamp?: string };
            status: { conditions?: { type: string; status: string }[] };
          }) =>
            p.spec.nodeName !== lost.node &&
            !p.metadata.deletionTimestamp &&
            p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
        if (ready.length >= 2) {
          fullAt = Date.now();
          break;
        }
        await sleep(1_000);
      }
      // Long enough for the free account to cross its limit (its over-admission is checked).
      await sleep(Math.max(10_000, 80_000 - (Date.now() - cutAt)));
    } finally {
      result = await check.stop(cutAt || undefined);
    }
    const { keyed: keyedResult, anonymous: anonymousResult, limited: limitedResult, total } = result;
    const dayLimit = check.dayLimit;
    const { lines, lastFailure } = timeline([keyedResult, anonymousResult, limitedResult], cutAt);
    log(`answers by second (t+0: the link cut):\n${lines}`);
    log(`answers during the node loss: ${JSON.stringify(total)}`);
    // A gateway container that restarted (Envoy once crashed with a segfault during a drain) explains
    // connection errors no node loss should cause.
    const restarts = (
      await kj('-n', ns, 'get', 'pods', '-l', 'app.kubernetes.io/component=gateway')
    ).items.flatMap(
      (p: {
        metadata: { name: string };
        status: { containerStatuses?: { name: string; restartCount: number; lastState?: unknown }[] };
      }) =>
        (p.status.containerStatuses ?? [])
          .filter((c) => c.restartCount > 0)
          .map((c) => `${p.metadata.name}/${c.name}: ${c.restartCount} (${JSON.stringify(c.lastState)})`),
    );
    log(`gateway containers restarted: ${restarts.length ? restarts.join('; ') : 'none'}`);
    log(
      `503/5001: ${total['503/5001']}; last answer other than 200/429 ${lastFailure === undefined ? 'none' : `at t+${lastFailure} s`}; the lost detect pod out of every gateway's balancing (Envoy's /clusters) ${ejectedAt(await ejected)}; full capacity (2 detect pods Ready elsewhere) ${fullAt === undefined ? 'not within 420 s' : `at t+${Math.round((fullAt - cutAt) / 100) / 10} s`}`,
    );
    const figures = failoverFigures(
      [keyedResult, anonymousResult, limitedResult],
      cutAt,
      limitedResult.counts,
      dayLimit,
    );
    const promotedMs = await promoted;
    log(
      `Redis: the primary ${primary.name} lost with ${lost.node}; a replica promoted ${promotedMs === undefined ? 'not within 60 s' : `at t+${(promotedMs / 1000).toFixed(1)} s`} (${(await primaryPod(lost.node)).name}); ${figures.window}; the free account (day limit ${dayLimit}): ${JSON.stringify(limitedResult.counts)}, ${figures.overAdmission}`,
    );
    const charged = await check.after(keyedResult.counts['200']);
    // A request whose connection failed after it was sent may have been served and charged, as one
    // k6's stop cut: neither is a 503.
    expect(charged, 'no 503 charged').toBeLessThanOrEqual(
      keyedResult.counts['200'] + keyedResult.unanswered + keyedResult.counts['connection error'],
    );
    expectOnly(
      {
        counts: total,
        unexpected: [keyedResult, anonymousResult, limitedResult].flatMap((r) => r.unexpected),
      },
      ['200', '429', '503/5001'],
    );
    expect(fullAt, 'two detect pods Ready off the lost node').toBeDefined();
    expect(promotedMs, 'a replica promoted').toBeDefined();
    expect(promotedMs, 'a replica promoted within 20 s of the cut').toBeLessThanOrEqual(20_000);
    // Counters are not waited for (docs/redis.md): what a failover can lose is what the primary had
    // counted and not yet sent its replicas, both online and in sync before the cut (replicasOnline).
    // Here (nodes on one host, the stream delivered as it is written) that is nothing: every 200 is
    // counted on the promoted replica, and the free account is admitted exactly its limit.
    expect(charged, "every 200 in the key's count").toBeGreaterThanOrEqual(keyedResult.counts['200']);
    expect(figures.overAdmitted, 'the free account admitted beyond its limit').toBe(0);
  }, 900_000);
}

/**
 * The answers of several k6 runs added up second by second, as lines `t+N s: 200 × a, 503/5001 × b`
 * (t: seconds since `zero`, epoch ms), and the last second at or after `zero` with an answer other than
 * 200 and 429.
 */
function timeline(
  runs: { perSecond: Map<number, Counts> }[],
  zero: number,
): { lines: string; lastFailure: number | undefined } {
  const zeroSecond = Math.floor(zero / 1000);
  const seconds = [...new Set(runs.flatMap((r) => [...r.perSecond.keys()]))].sort((a, b) => a - b);
  let lastFailure: number | undefined;
  const lines: string[] = [];
  for (const second of seconds) {
    const all = zeroCounts();
    for (const r of runs)
      for (const [o, n] of Object.entries(r.perSecond.get(second) ?? {})) all[o as keyof Counts] += n;
    const shown = Object.entries(all).filter(([, n]) => n > 0);
    const t = second - zeroSecond;
    if (t >= 0 && shown.some(([o]) => o !== '200' && o !== '429')) lastFailure = t;
    lines.push(`  t${t >= 0 ? '+' : ''}${t} s: ${shown.map(([o, n]) => `${o} × ${n}`).join(', ')}`);
  }
  return { lines: lines.join('\n'), lastFailure };
}
