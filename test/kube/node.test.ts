// The local node (npm run kube:up / kube:down) on this machine: up to a Ready node, a pod scheduled,
// started and Ready on it, a second up a no-op, then down leaving nothing of the node behind (processes,
// bridge, veths, pod network namespaces, KUBE-* iptables chains, ipsets, mounts, kubepods cgroups) and
// the host's sysctls as they were.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../services/common/errors.ts';
import { eventually } from '../support/eventually.ts';
import {
  describeWithKubeNode,
  hostPaths,
  hostSysctls,
  type KubeNodeFacts,
  kubeNodeFacts,
  lastLine,
  nodeLeftovers,
  runNodeScript,
} from '../support/kube-node.ts';
import { expectAnonymousJpegScored, get, post } from '../support/stack-client.ts';
import { STACK_TOOLS } from '../support/stack-tools.ts';
import { describeWithTool } from '../support/tools.ts';

const execFileAsync = promisify(execFile);
const REPO = new URL('../../', import.meta.url).pathname;

interface Pod {
  metadata: { labels?: Record<string, string> };
}

describeWithKubeNode('the local Kubernetes node', () => {
  let facts: KubeNodeFacts;
  let sysctlsBefore: Record<string, string>;
  let pathsBefore: Record<string, boolean>;
  let down = false;

  const kubectl = async (...args: string[]) =>
    (await execFileAsync(facts.kubectl, ['--kubeconfig', facts.kubeconfig, ...args], { encoding: 'utf8' }))
      .stdout;

  beforeAll(async () => {
    facts = kubeNodeFacts();
    expect(nodeLeftovers(facts), 'the machine has the node running or its remains before kube:up').toEqual(
      [],
    );
    sysctlsBefore = hostSysctls();
    pathsBefore = hostPaths();
    const out = await runNodeScript('up.sh');
    console.log(
      out
        .split('\n')
        .filter((l) => l.includes('kube-node: ['))
        .join('\n'),
    );
    expect(lastLine(out)).toBe(`KUBECONFIG=${facts.kubeconfig}`);
  }, 900_000);

  afterAll(async () => {
    if (!down) await runNodeScript('down.sh');
  }, 300_000);

  it('runs a pod to Ready on the node, with cluster DNS and the metrics API', async () => {
    await kubectl(
      'run',
      'trivial',
      `--image=${facts.pauseImage}`,
      '--image-pull-policy=Never',
      '--restart=Never',
      '--overrides={"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":65535}}}',
    );
    await kubectl('wait', '--for=condition=Ready', 'pod/trivial', '--timeout=120s');
    const pod = JSON.parse(await kubectl('get', 'pod', 'trivial', '-o', 'json'));
    expect(pod.spec.nodeName).toBe(facts.nodeName);
    expect(pod.status.podIP).toMatch(/^10\.244\.0\.\d+$/);
    const dns = JSON.parse(
      await kubectl(
        '-n',
        'kube-system',
        'get',
        'endpointslices',
        '-l',
        'kubernetes.io/service-name=kube-dns',
        '-o',
        'json',
      ),
    );
    expect(dns.items.flatMap((s: { endpoints: unknown[] }) => s.endpoints)).not.toHaveLength(0);
    // metrics-server scrapes the kubelet every 15 s: the node's figures come with the first scrape.
    await eventually(
      'the node in the metrics API',
      async () =>
        (await kubectl('get', '--raw', '/apis/metrics.k8s.io/v1beta1/nodes')).includes(facts.nodeName)
          ? true
          : undefined,
      90_000,
    );
  }, 180_000);

  it('a second kube:up while up changes nothing', async () => {
    const out = await runNodeScript('up.sh');
    expect(out).toContain('already up');
    expect(lastLine(out)).toBe(`KUBECONFIG=${facts.kubeconfig}`);
  }, 60_000);

  describeWithTool(STACK_TOOLS.helm, 'chart on a real node', () => {
    const release = 'nsfwdetector';
    const ns = 'nsfwdetector';
    let gateway: string;
    const helm = async (...args: string[]) =>
      (
        await execFileAsync(STACK_TOOLS.helm.find() as string, ['--kubeconfig', facts.kubeconfig, ...args], {
          encoding: 'utf8',
          cwd: REPO,
        })
      ).stdout;

    beforeAll(async () => {
      const out = await runNodeScript('image.sh');
      console.log(
        out
          .split('\n')
          .filter((l) => l.startsWith('kube-image:'))
          .join('\n'),
      );
      expect(lastLine(out)).toMatch(new RegExp(`^${facts.registry}/nsfwdetector@sha256:[0-9a-f]{64}$`));
      await helm(
        'install',
        release,
        'charts/nsfwdetector',
        '--namespace',
        ns,
        '--create-namespace',
        '-f',
        join(facts.stateDir, 'image-values.yaml'),
        '-f',
        'tools/kube-node/values-node.yaml',
        '--wait',
        '--timeout',
        '15m',
      );
      const svc = JSON.parse(await kubectl('-n', ns, 'get', 'service', `${release}-gateway`, '-o', 'json'));
      gateway = `http://${svc.spec.clusterIP}:${svc.spec.ports[0].port}`;
    }, 1_800_000);

    it('every Deployment and StatefulSet Ready, helm test passes, no pod restarted', async () => {
      for (const kind of ['deployments', 'statefulsets']) {
        const list = JSON.parse(await kubectl('-n', ns, 'get', kind, '-o', 'json'));
        expect(list.items.length, kind).toBeGreaterThan(0);
        for (const w of list.items)
          expect(w.status.readyReplicas ?? 0, `${kind}/${w.metadata.name}`).toBe(w.spec.replicas);
      }
      console.log((await helm('test', release, '--namespace', ns, '--timeout', '5m')).trim());
      const pods = JSON.parse(await kubectl('-n', ns, 'get', 'pods', '-o', 'json'));
      for (const pod of pods.items)
        for (const c of pod.status.containerStatuses ?? [])
          expect(c.restartCount, `${pod.metadata.name}/${c.name} restarts`).toBe(0);
      // detect's Ready time after its container started (the kubelet's second-granular clocks).
      for (const pod of pods.items.filter(
        (p: Pod) => p.metadata.labels?.['app.kubernetes.io/component'] === 'detect',
      )) {
        const started = Date.parse(pod.status.containerStatuses[0].state.running.startedAt);
        const ready = Date.parse(
          pod.status.conditions.find((c: { type: string }) => c.type === 'Ready').lastTransitionTime,
        );
        console.log(
          `detect pod ${pod.metadata.name}: Ready ${(ready - started) / 1000} s after its container started`,
        );
      }
    }, 600_000);

    it('health and detect through the gateway Service answer as the spec says', async () => {
      const health = await get(gateway, '/api/public/health');
      expect(health.status, JSON.stringify(health.body)).toBe(200);
      const values = JSON.parse(
        await helm('get', 'values', release, '--namespace', ns, '--all', '-o', 'json'),
      );
      expectAnonymousJpegScored(await post(gateway, '/api/public/detect'), String(values.config.anonPerDay));
      const noKey = await post(gateway, '/api/open/detect');
      expect({ status: noKey.status, code: noKey.code }).toEqual({
        status: 401,
        code: ERRORS.INVALID_API_KEY.code,
      });
    }, 120_000);
  });

  it('kube:down leaves nothing of the node behind and restores the sysctls', async () => {
    down = true;
    await runNodeScript('down.sh');
    expect(nodeLeftovers(facts)).toEqual([]);
    expect(hostSysctls()).toEqual(sysctlsBefore);
    expect(hostPaths()).toEqual(pathsBefore);
  }, 300_000);
});
