// The local node (npm run kube:up / kube:down) on this machine, brought up once, with three nodes, for
// every phase here (one bring-up, one kube:image, one kube:down for all; nodes 2 and 3 cordoned until
// the three-node phase): up to Ready nodes, a pod scheduled, started and Ready on the first, a second up
// a no-op; then the chart, installed from the OCI artifact kube:image pushed, on one install shared by
// every check: Ready, helm test, the contract through the gateway, the
// NetworkPolicies enforced, client-sent identity headers ignored, a second release beside it, a
// zero-downtime upgrade, self-healing and HPA scaling under k6 load; then, on the same node, the
// operator's suite (operator.suite.ts), skaffold dev's (skaffold-dev.suite.ts) and the edge under a
// reconnecting slowloris (edge-slowloris.suite.ts), each leaving the node as it found it; then the
// chart on three nodes (nodes.suite.ts: spread, drain, failovers, last a node
// lost); finally down leaving nothing of the node behind (processes, bridge, veths, pod network namespaces, KUBE-* iptables chains, ipsets,
// nf_tables tables, mounts, kubepods cgroups) and the host's sysctls as they were.
// Every figure is printed on a line starting `kube-node:`.

import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../lib/common/errors.ts';
import { adminCliArgs } from '../support/chart-kubectl.ts';
import { eventually } from '../support/eventually.ts';
import {
  bringDown,
  bringUp,
  describeWithKubeNode,
  type HostBefore,
  helmOnNode,
  installChart,
  type KubeNodeFacts,
  kubectl,
  kubectlJson,
  kubeNodeFacts,
  lastLine,
  NODE_UP_TIMEOUT,
  type NodeImages,
  probe,
  pushImages,
  removeRelease,
  runNodeScript,
  startProbe,
  tagInRegistry,
  takeDown,
  upgradeOnNode,
} from '../support/kube-node.ts';
import { REPO } from '../support/paths.ts';
import { expectAnonymousJpegScored, get, partialUpload, post } from '../support/stack-client.ts';
import { STACK_TOOLS } from '../support/stack-tools.ts';
import { type Counts, expectOnly, type SteadyResult, startLoad } from '../support/steady-load.ts';
import { COUNTED_PHASE_MS, withinOneUtcDay } from '../support/utc-day.ts';
import { edgeSlowlorisOnTheNode } from './edge-slowloris.suite.ts';
import { NODES, threeNodesOnTheCluster } from './nodes.suite.ts';
import { operatorOnTheNode } from './operator.suite.ts';
import { skaffoldDevOnTheNode } from './skaffold-dev.suite.ts';

const SUITE_VALUES = join(REPO, 'test/kube/values-suite.yaml');

interface Pod {
  metadata: { name: string; labels?: Record<string, string>; deletionTimestamp?: string };
  status: { phase: string; conditions?: { type: string; status: string }[] };
}

const log = (line: string) => console.log(`kube-node: ${line}`);

describeWithKubeNode('the local Kubernetes node', () => {
  let facts: KubeNodeFacts;
  let before: HostBefore;
  let down = false;
  const k = (...args: string[]) => kubectl(facts, args);

  beforeAll(async () => {
    facts = kubeNodeFacts();
    before = await bringUp(facts, NODES);
    // The one-node phases run on the first node alone, as on a one-node cluster: the others cordoned
    // until the three-node phase (nodes.suite.ts) makes every node schedulable again.
    const others = (await kubectlJson(facts, ['get', 'nodes'])).items
      .map((n: { metadata: { name: string } }) => n.metadata.name)
      .filter((n: string) => n !== facts.nodeName);
    expect(others).toHaveLength(NODES - 1);
    await k('cordon', ...others);
  }, NODE_UP_TIMEOUT);

  // When the last check did not bring the node down (an earlier failure, or a run of some checks only).
  afterAll(async () => {
    if (!down) await takeDown();
  }, 300_000);

  it('runs a pod to Ready on the first node, with cluster DNS and the metrics API', async () => {
    await k(
      'run',
      'trivial',
      `--image=${facts.pauseImage}`,
      '--image-pull-policy=Never',
      '--restart=Never',
      `--overrides=${JSON.stringify({ spec: { nodeSelector: { 'kubernetes.io/hostname': facts.nodeName }, securityContext: { runAsNonRoot: true, runAsUser: 65535 } } })}`,
    );
    await k('wait', '--for=condition=Ready', 'pod/trivial', '--timeout=120s');
    const pod = await kubectlJson(facts, ['get', 'pod', 'trivial']);
    expect(pod.spec.nodeName).toBe(facts.nodeName);
    expect(pod.status.podIP).toMatch(/^10\.244\.0\.\d+$/);
    const dns = await kubectlJson(facts, [
      '-n',
      'kube-system',
      'get',
      'endpointslices',
      '-l',
      'kubernetes.io/service-name=kube-dns',
    ]);
    expect(dns.items.flatMap((s: { endpoints: unknown[] }) => s.endpoints)).not.toHaveLength(0);
    // metrics-server scrapes the kubelet every 15 s: the node's figures come with the first scrape.
    await eventually(
      'the node in the metrics API',
      async () =>
        (await k('get', '--raw', '/apis/metrics.k8s.io/v1beta1/nodes')).includes(facts.nodeName)
          ? true
          : undefined,
      90_000,
    );
    await k('delete', 'pod', 'trivial', '--wait=false');
  }, 180_000);

  it('a second kube:up while up changes nothing', async () => {
    const out = await runNodeScript('up.sh');
    expect(out).toContain('already up');
    expect(lastLine(out)).toBe(`KUBECONFIG=${facts.kubeconfig}`);
  }, 60_000);

  chartOnTheNode(() => facts);
  operatorOnTheNode(() => facts);
  skaffoldDevOnTheNode(() => facts);
  edgeSlowlorisOnTheNode(() => facts);
  // Last: it loses a node.
  threeNodesOnTheCluster(() => facts);

  it('kube:down leaves nothing of any node behind and restores the host', async () => {
    down = true;
    await bringDown(facts, before);
  }, 300_000);
});

function chartOnTheNode(nodeFacts: () => KubeNodeFacts) {
  describeWithKubeNode('chart on a real node', () => {
    const release = 'nsfwdetector';
    const ns = 'nsfwdetector';
    let facts: KubeNodeFacts;
    let images: NodeImages;
    let gateway: string;
    let key: string;
    const email = 'load@example.com';
    const k = (...args: string[]) => kubectl(facts, args);
    const kj = (...args: string[]) => kubectlJson(facts, args);
    /** The admin CLI in a gateway pod's quota container (it has the Redis the chart runs). */
    const admin = async (...args: string[]) => JSON.parse(await k('-n', ns, ...adminCliArgs(release, args)));
    const usedToday = async (): Promise<number> => (await admin('usage', email)).usage.day.used;
    beforeAll(async () => {
      facts = nodeFacts();
      images = await pushImages(facts);
      const started = performance.now();
      await installChart(facts, images, { release, namespace: ns, valuesFiles: [SUITE_VALUES] });
      log(`helm install ${images.chart} --version ${images.chartVersion} --wait: ${seconds(started)} s`);
      const svc = await kj('-n', ns, 'get', 'service', `${release}-gateway`);
      gateway = `http://${svc.spec.clusterIP}:${svc.spec.ports[0].port}`;
      await admin('create-account', '--email', email, '--tier', 'pro');
      key = (await admin('issue-key', email, '--name', 'load')).secret;
      expect(key).toMatch(/^nsk_live_/);
    }, 1_800_000);

    afterAll(async () => {
      if (facts) await removeRelease(facts, release, ns);
    }, 600_000);

    it('every Deployment and StatefulSet Ready, helm test passes, no pod restarted', async () => {
      for (const kind of ['deployments', 'statefulsets']) {
        const list = await kj('-n', ns, 'get', kind);
        expect(list.items.length, kind).toBeGreaterThan(0);
        for (const w of list.items)
          expect(w.status.readyReplicas ?? 0, `${kind}/${w.metadata.name}`).toBe(w.spec.replicas);
      }
      try {
        console.log(
          (await helmOnNode(facts, ['test', release, '--namespace', ns, '--timeout', '5m'])).trim(),
        );
      } catch (err) {
        // A failed smoke pod is kept (deleted on success only): what it saw.
        const log = await kubectl(facts, ['-n', ns, 'logs', `${release}-test`]).catch(String);
        throw new Error(`${(err as Error).message}\nsmoke pod's log:\n${log}`);
      }
      const all = await kj('-n', ns, 'get', 'pods');
      for (const pod of all.items)
        for (const c of pod.status.containerStatuses ?? [])
          expect(c.restartCount, `${pod.metadata.name}/${c.name} restarts`).toBe(0);
      // detect's Ready time after its container started (the kubelet's second-granular clocks).
      for (const pod of all.items.filter(
        (p: Pod) => p.metadata.labels?.['app.kubernetes.io/component'] === 'detect',
      )) {
        const started = Date.parse(pod.status.containerStatuses[0].state.running.startedAt);
        const ready = Date.parse(
          pod.status.conditions.find((c: { type: string }) => c.type === 'Ready').lastTransitionTime,
        );
        log(
          `detect pod ${pod.metadata.name}: Ready ${(ready - started) / 1000} s after its container started`,
        );
      }
    }, 600_000);

    it('health and detect through the gateway Service answer as the spec says', async () => {
      const health = await get(gateway, '/api/public/health');
      expect(health.status, JSON.stringify(health.body)).toBe(200);
      expectAnonymousJpegScored(await post(gateway, '/api/public/detect'), await anonPerDay());
      const noKey = await post(gateway, '/api/open/detect');
      expect({ status: noKey.status, code: noKey.code }).toEqual({
        status: 401,
        code: ERRORS.INVALID_API_KEY.code,
      });
      const keyed = await post(gateway, '/api/open/detect', { headers: { authorization: `Bearer ${key}` } });
      expect({ status: keyed.status, code: keyed.code, tier: keyed.headers.get('x-quota-tier') }).toEqual({
        status: 200,
        code: 0,
        tier: 'pro',
      });
    }, 120_000);

    const anonPerDay = async () =>
      String(
        JSON.parse(
          await helmOnNode(facts, ['get', 'values', release, '--namespace', ns, '--all', '-o', 'json']),
        ).config.anonPerDay,
      );

    it('NetworkPolicies: only the gateway is reachable from other pods; detect and health from the gateway', async () => {
      const svc = async (name: string, port: number) => {
        const s = await kj('-n', ns, 'get', 'service', name);
        return { host: s.spec.clusterIP as string, port };
      };
      const targets = {
        gateway: await svc(`${release}-gateway`, 80),
        detect: await svc(`${release}-detect`, 8080),
        health: await svc(`${release}-health`, 8080),
        'quota sidecar': await svc(`${release}-gateway`, 8081),
        redis: await svc(`${release}-redis`, 6379),
      };
      const elsewhere = 'probe-elsewhere';
      await k('create', 'namespace', elsewhere);
      try {
        await Promise.all([startProbe(facts, images, ns), startProbe(facts, images, elsewhere)]);
        const closedToOthers = {
          gateway: 'open',
          detect: 'closed',
          health: 'closed',
          'quota sidecar': 'closed',
          redis: 'closed',
        };
        const fromSameNamespace = await probe(facts, ['-n', ns, 'probe'], targets);
        const fromElsewhere = await probe(facts, ['-n', elsewhere, 'probe'], targets);
        // From a gateway pod (its labels are what the policies admit): the upstreams are there.
        const fromGateway = await probe(
          facts,
          ['-n', ns, `deploy/${release}-gateway`, '-c', 'quota'],
          targets,
        );
        log(`reachable from a pod in ${ns}: ${JSON.stringify(fromSameNamespace)}`);
        log(`reachable from a pod in ${elsewhere}: ${JSON.stringify(fromElsewhere)}`);
        log(`reachable from the gateway pod: ${JSON.stringify(fromGateway)}`);
        expect(fromSameNamespace).toEqual(closedToOthers);
        expect(fromElsewhere).toEqual(closedToOthers);
        expect(fromGateway).toMatchObject({ gateway: 'open', detect: 'open', health: 'open', redis: 'open' });
      } finally {
        await k('-n', ns, 'delete', 'pod', 'probe', '--wait=false');
        await k('delete', 'namespace', elsewhere, '--wait=false');
      }
    }, 300_000);

    it('identity headers a client sends through the gateway change nothing', async () => {
      const forged = {
        'x-account-id': 'acct_forged',
        'x-quota-tier': 'pro',
        'x-edge-secret': 'a-guess-at-the-edge-secret',
        'x-charge-id': 'charge_forged',
      };
      const first = await post(gateway, '/api/public/detect');
      const second = await post(gateway, '/api/public/detect', { headers: forged });
      // Still the anonymous tier, counted against the same client: one fewer left today.
      expectAnonymousJpegScored(second, await anonPerDay());
      expect(Number(second.headers.get('x-ratelimit-remaining'))).toBe(
        Number(first.headers.get('x-ratelimit-remaining')) - 1,
      );
      const keyless = await post(gateway, '/api/open/detect', { headers: forged });
      expect({ status: keyless.status, code: keyless.code }).toEqual({
        status: 401,
        code: ERRORS.INVALID_API_KEY.code,
      });
      // One request counted: a short phase (the test's own timeout is short).
      await withinOneUtcDay(30_000, log);
      const usedBefore = await usedToday();
      const keyed = await post(gateway, '/api/open/detect', {
        headers: { ...forged, 'x-quota-tier': 'free', authorization: `Bearer ${key}` },
      });
      expect({ status: keyed.status, tier: keyed.headers.get('x-quota-tier') }).toEqual({
        status: 200,
        tier: 'pro',
      });
      expect(await usedToday()).toBe(usedBefore + 1);
    }, 120_000);

    it('fairness: 30 slow uploads from one key hold only its bound; another account and anonymous clients are served', async () => {
      const values = JSON.parse(
        await helmOnNode(facts, ['get', 'values', release, '--namespace', ns, '--all', '-o', 'json']),
      );
      // One detect pod here (the HPA's floor): its per-client bound is the whole of it. The check is over
      // well within UPLOAD_MIN_RATE_GRACE_MS, after which the stalled uploads would be cut as too slow.
      const bound = Number(values.config.maxUploadsPerClient);
      const uploads = 30;
      const keyOf = async (who: string) => {
        await admin('create-account', '--email', `${who}@example.com`, '--tier', 'pro');
        return {
          authorization: `Bearer ${(await admin('issue-key', `${who}@example.com`, '--name', who)).secret}`,
        };
      };
      const greedy = await keyOf('greedy');
      const other = await keyOf('other');
      const stalled = Array.from({ length: uploads }, () =>
        partialUpload(gateway, { path: '/api/open/detect', headers: greedy }),
      );
      try {
        await Promise.all(stalled.map((u) => u.started));
        await expect
          .poll(() => stalled.filter((u) => u.answered).length, { timeout: 60_000 })
          .toBe(uploads - bound);
        const refused = await Promise.all(stalled.filter((u) => u.answered).map((u) => u.done));
        for (const answer of refused)
          expect({ status: answer.status, code: answer.code }).toEqual({
            status: 503,
            code: ERRORS.UNAVAILABLE.code,
          });
        const otherAnswer = await post(gateway, '/api/open/detect', { headers: other });
        const anonymous = await post(gateway, '/api/public/detect');
        log(
          `${uploads} stalled uploads from one key: ${bound} held, ${refused.length} refused 503/5001; meanwhile another account ${otherAnswer.status}, anonymous ${anonymous.status}`,
        );
        expect(otherAnswer.status, JSON.stringify(otherAnswer.body)).toBe(200);
        expectAnonymousJpegScored(anonymous, String(values.config.anonPerDay));
      } finally {
        for (const upload of stalled) upload.abort();
        await Promise.allSettled(stalled.map((u) => u.done));
      }
    }, 180_000);

    it('a second release in the namespace (fullnameOverride) does not collide with the first', async () => {
      const other = 'other';
      const prefix = 'nsfwd-b';
      // Minimal: no detect pod (health does not need one), small requests, its own Redis.
      await installChart(facts, images, {
        release: other,
        namespace: ns,
        set: {
          fullnameOverride: prefix,
          'detect.autoscaling.enabled': 'false',
          'detect.replicas': '0',
          'detect.podDisruptionBudget.enabled': 'false',
          'tests.enabled': 'false',
          'gateway.resources.requests.cpu': '10m',
          'gateway.quotaResources.requests.cpu': '10m',
          'health.resources.requests.cpu': '10m',
          'redis.resources.requests.cpu': '10m',
        },
      });
      try {
        const envoy = await kj('-n', ns, 'get', 'configmap', `${prefix}-envoy`);
        expect(envoy.data['envoy.yaml']).toContain(`"address": "${prefix}-detect-pods"`);
        const otherSvc = await kj('-n', ns, 'get', 'service', `${prefix}-gateway`);
        const otherGateway = `http://${otherSvc.spec.clusterIP}:${otherSvc.spec.ports[0].port}`;
        const answers = {
          [release]: (await get(gateway, '/api/public/health')).status,
          [other]: (await get(otherGateway, '/api/public/health')).status,
        };
        log(`health through each release's own gateway: ${JSON.stringify(answers)}`);
        expect(answers).toEqual({ [release]: 200, [other]: 200 });
        // The first release's detect is still its own.
        const keyed = await post(gateway, '/api/open/detect', {
          headers: { authorization: `Bearer ${key}` },
        });
        expect(keyed.status).toBe(200);
      } finally {
        await helmOnNode(facts, ['uninstall', other, '--namespace', ns, '--wait']);
        await k('-n', ns, 'delete', 'pvc', '-l', `app.kubernetes.io/instance=${other}`, '--wait=false');
      }
    }, 900_000);

    it('helm upgrade to a new image tag and configuration under steady load: no request fails', async () => {
      await tagInRegistry(facts, images.digest, 'upgrade');
      const load = startLoad(gateway, 4, key);
      let counts: Counts;
      let unanswered: number;
      let result: SteadyResult;
      const started = performance.now();
      try {
        await sleep(5_000);
        await upgradeOnNode(facts, images, release, ns, [
          'image.digest=',
          'image.tag=upgrade',
          'config.logLevel=warn',
        ]);
        log(`helm upgrade --wait under load: ${seconds(started)} s`);
        await sleep(5_000);
      } finally {
        result = await load.stop();
        ({ counts, unanswered } = result);
      }
      log(`answers during the upgrade: ${JSON.stringify(counts)}; cut by stopping k6: ${unanswered}`);
      for (const component of ['detect', 'gateway', 'health'])
        for (const pod of (
          await kj('-n', ns, 'get', 'pods', '-l', `app.kubernetes.io/component=${component}`)
        ).items)
          if (!pod.metadata.deletionTimestamp)
            expect(pod.spec.containers.map((c: { image: string }) => c.image)).toContain(
              `${facts.registry}/nsfwdetector:upgrade`,
            );
      expect(counts['200']).toBeGreaterThan(0);
      expectOnly(result, ['200']);
    }, 900_000);

    it('heals under load: a detect, a gateway and the Redis pod deleted; nothing else answered, nothing lost', async () => {
      await withinOneUtcDay(COUNTED_PHASE_MS, log);
      const usedBefore = await usedToday();
      const load = startLoad(gateway, 4, key, { timeline: true });
      let counts: Counts;
      let unanswered: number;
      let result: SteadyResult;
      let perSecond: Map<number, Counts>;
      let usedBeforeRedis: number;
      // When each deletion was made: the answers of each second are put down to the last one before it.
      const deleted: [string, number][] = [];
      try {
        await sleep(5_000);
        deleted.push(['detect', Math.floor(Date.now() / 1000)]);
        await deleteOnePod(facts, ns, 'detect');
        await sleep(15_000);
        deleted.push(['gateway', Math.floor(Date.now() / 1000)]);
        await deleteOnePod(facts, ns, 'gateway');
        await sleep(15_000);
        usedBeforeRedis = await usedToday();
        await sleep(2_000);
        deleted.push(['redis', Math.floor(Date.now() / 1000)]);
        await deleteOnePod(facts, ns, 'redis');
        await sleep(5_000);
        await k('-n', ns, 'rollout', 'status', `statefulset/${release}-redis`, '--timeout=300s');
        for (const d of ['detect', 'gateway'])
          await k('-n', ns, 'rollout', 'status', `deployment/${release}-${d}`, '--timeout=300s');
        await sleep(5_000);
      } finally {
        result = await load.stop();
        ({ counts, unanswered, perSecond } = result);
      }
      log(`answers while pods were deleted: ${JSON.stringify(counts)}; cut by stopping k6: ${unanswered}`);
      const failedAfter: Record<string, Record<string, number>> = {};
      for (const [second, answers] of perSecond) {
        const after = deleted.filter(([, at]) => at <= second).at(-1)?.[0] ?? 'before any deletion';
        for (const [outcome, n] of Object.entries(answers))
          if (n > 0 && outcome !== '200' && outcome !== '429') {
            failedAfter[after] ??= {};
            (failedAfter[after] as Record<string, number>)[outcome] =
              (failedAfter[after]?.[outcome] ?? 0) + n;
          }
      }
      log(`answers other than 200/429 by the deletion they followed: ${JSON.stringify(failedAfter)}`);
      expectOnly(result, ['200', '429', '503/5001']);
      expect(counts['200']).toBeGreaterThan(0);
      // The account and key made before Redis went still work; its counts came back from the volume.
      const after = await post(gateway, '/api/open/detect', { headers: { authorization: `Bearer ${key}` } });
      expect(after.status, JSON.stringify(after.body)).toBe(200);
      await sleep(3_000); // fire-and-forget refunds of the last 503s
      const usedAfter = await usedToday();
      log(
        `usage of the load account: ${usedBefore} before, ${usedBeforeRedis} before Redis was deleted, ${usedAfter} after (${counts['200']} + 1 answered 200)`,
      );
      expect(usedAfter).toBeGreaterThanOrEqual(usedBeforeRedis);
      // No 503 was charged: the day's count grew by the 200s alone (and the requests k6's stop cut
      // before their answer, which were sent and may have been served).
      expectChargedFor(usedAfter - usedBefore, counts['200'] + 1, unanswered);
    }, 900_000);

    it('HPA: load pushes detect from 1 to 2 pods, and back to 1 after it', async () => {
      const hpa = `${release}-detect`;
      const replicas = async () => (await kj('-n', ns, 'get', 'deployment', hpa)).spec.replicas as number;
      await eventually(
        'detect back at 1 replica before the load',
        async () => ((await replicas()) === 1 ? true : undefined),
        300_000,
      );
      await withinOneUtcDay(COUNTED_PHASE_MS, log);
      const usedBefore = await usedToday();
      const load = startLoad(gateway, 12, key);
      const started = performance.now();
      let counts: Counts;
      let unanswered: number;
      let result: SteadyResult;
      let up: number;
      let ready: number;
      try {
        await eventually(
          'the HPA scaling detect to 2',
          async () => ((await replicas()) === 2 ? true : undefined),
          300_000,
        ).catch(async (err) => {
          // What the HPA saw (its metrics and conditions) tells a load too light from missing metrics.
          const status = (await kj('-n', ns, 'get', 'hpa', hpa)).status;
          throw new Error(`${(err as Error).message}; the HPA's status: ${JSON.stringify(status)}`);
        });
        up = seconds(started);
        await k('-n', ns, 'rollout', 'status', `deployment/${hpa}`, '--timeout=300s');
        ready = seconds(started);
        await sleep(5_000);
      } finally {
        result = await load.stop();
        ({ counts, unanswered } = result);
      }
      log(`HPA: detect scaled 1 -> 2 ${up} s after the load started, the second pod Ready at ${ready} s`);
      log(`answers during the scale-up: ${JSON.stringify(counts)}; cut by stopping k6: ${unanswered}`);
      expectOnly(result, ['200', '429', '503/5001']);
      await sleep(3_000);
      expectChargedFor((await usedToday()) - usedBefore, counts['200'], unanswered);
      const stopped = performance.now();
      await eventually(
        'the HPA scaling detect back to 1',
        async () => ((await replicas()) === 1 ? true : undefined),
        300_000,
      );
      log(`HPA: detect back to 1 pod ${seconds(stopped)} s after the load stopped`);
    }, 900_000);
  }, [STACK_TOOLS.helm, STACK_TOOLS.k6]);
}

const seconds = (since: number) => Math.round((performance.now() - since) / 100) / 10;

/** The day's count grew by the answers 200 alone: no 503 charged (give or take requests k6's stop cut). */
function expectChargedFor(charged: number, answered200: number, unanswered: number): void {
  expect(charged, 'charged at least every 200').toBeGreaterThanOrEqual(answered200);
  expect(charged, 'no 503 charged').toBeLessThanOrEqual(answered200 + unanswered);
}

/** Deletes the first live pod of a component (not waiting for it to go). */
async function deleteOnePod(facts: KubeNodeFacts, ns: string, component: string): Promise<void> {
  const list = await kubectlJson(facts, [
    '-n',
    ns,
    'get',
    'pods',
    '-l',
    `app.kubernetes.io/component=${component}`,
  ]);
  const pod = list.items.find((p: Pod) => !p.metadata.deletionTimestamp && p.status.phase === 'Running');
  expect(pod, `a running ${component} pod`).toBeDefined();
  await kubectl(facts, ['-n', ns, 'delete', 'pod', pod.metadata.name, '--wait=false']);
  log(`deleted pod ${pod.metadata.name}`);
}
