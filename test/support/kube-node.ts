// The local single-node Kubernetes cluster (tools/kube-node: npm run kube:up / kube:down / kube:image)
// for the node suites: its facts, `describeWithKubeNode`, the scripts run as children, kubectl and helm
// on it, the chart installed from the pushed OCI artifact, and the list of anything of the node's still
// on the machine (processes, bridge, iptables chains, ipsets, nf_tables tables, mounts, cgroups, pod
// network namespaces).
//
// One node for every node suite (test/kube/node.test.ts): beforeAll `bringUp()` (kube:up, with its
// preconditions); each suite then `pushImages()` (kube:image, once a run) and installs what it tests,
// and removes it after (`removeRelease()`), leaving the node as it found it; last `bringDown()`
// (kube:down, then the leftovers checked).

import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'vitest';
import { helmOk, removeHelmHome } from '../chart/helm.ts';
import { reportingWait } from './chart-kubectl.ts';
import { spawnChild } from './children.ts';
import { REPO } from './paths.ts';
import { describeWithTool, type Tool } from './tools.ts';

const execFileAsync = promisify(execFile);

const SCRIPTS = join(REPO, 'tools/kube-node');

export interface KubeNodeFacts {
  nodeDir: string;
  runDir: string;
  stateDir: string;
  kubeconfig: string;
  kubectl: string;
  bridge: string;
  /** host:port of the node's registry (loopback). */
  registry: string;
  nodeName: string;
  containerdSocket: string;
  dockerData: string;
  pauseImage: string;
  /** Every binary the node runs. */
  binaries: string[];
  /** Those not built yet. */
  missing: string[];
  /** A build of the missing ones is under way (.ci/run starts one in the background); kube:up waits for it. */
  building: boolean;
}

export function kubeNodeFacts(): KubeNodeFacts {
  return JSON.parse(execFileSync('bash', [join(SCRIPTS, 'describe.sh')], { encoding: 'utf8' }));
}

const INSTALL = 'bash .ci/install-k8s-tools.sh --node, as root (about 20 CPU-minutes the first time)';

/** The node's components, built or being built, and root to run them. */
export const KUBE_NODE: Tool = {
  name: 'the local Kubernetes node (root and its built components)',
  install: INSTALL,
  find: () => {
    const facts = process.getuid?.() === 0 ? kubeNodeFacts() : undefined;
    return facts && (facts.missing.length === 0 || facts.building) ? SCRIPTS : undefined;
  },
};

/**
 * The bound on a node suite's first hook: kube:up, which may first wait for the node's components that
 * .ci/run builds in the background on a machine that has built nothing, then the suite's installs.
 */
export const NODE_UP_TIMEOUT = 45 * 60_000;

export function describeWithKubeNode(name: string, body: () => void, also: Tool[] = []): void {
  describeWithTool([KUBE_NODE, ...also], name, body);
}

/** kubectl on the node; resolves with its stdout (`input`: its stdin). */
export async function kubectl(facts: KubeNodeFacts, args: string[], input?: string): Promise<string> {
  const run = execFileAsync(facts.kubectl, ['--kubeconfig', facts.kubeconfig, ...args], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (input !== undefined) {
    run.child.stdin?.end(input);
  }
  return (await run).stdout;
}

/** `kubectl get … -o json`, parsed. */
// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects, read field by field by each suite
export async function kubectlJson(facts: KubeNodeFacts, args: string[]): Promise<any> {
  return JSON.parse(await kubectl(facts, [...args, '-o', 'json']));
}

/** helm on the node (its caches in a temp directory, removed by bringDown); resolves with its stdout. */
export async function helmOnNode(facts: KubeNodeFacts, args: string[]): Promise<string> {
  return (await helmOk(args, { kubeconfig: facts.kubeconfig })).stdout;
}

/**
 * `helm upgrade --reuse-values --wait` of `release` in `namespace` to the chart kube:image pushed, with
 * `values` (`--set` key=value) changed.
 */
export async function upgradeOnNode(
  facts: KubeNodeFacts,
  images: NodeImages,
  release: string,
  namespace: string,
  values: string[],
): Promise<string> {
  const out = await nodeWait(
    facts,
    namespace,
    helmOnNode(facts, [
      'upgrade',
      release,
      images.chart,
      '--version',
      images.chartVersion,
      '--namespace',
      namespace,
      '--plain-http',
      '--reuse-values',
      ...values.flatMap((v) => ['--set', v]),
      '--wait',
      '--timeout',
      '10m',
    ]),
  );
  // Helm 3's --wait takes a Deployment as ready once its new pods are; its old pods go only after
  // minReadySeconds (detect's): the upgrade is over when every rollout is.
  const deployments = await kubectl(facts, [
    '-n',
    namespace,
    'get',
    'deployments',
    '-l',
    `app.kubernetes.io/instance=${release}`,
    '-o',
    'name',
  ]);
  for (const deployment of deployments.split('\n').filter(Boolean))
    await nodeWait(
      facts,
      namespace,
      kubectl(facts, ['-n', namespace, 'rollout', 'status', deployment, '--timeout=300s']),
    );
  return out;
}

/** What kube:image pushed: the service image, the chart as an OCI artifact, Helm values naming the images. */
export interface NodeImages {
  /** <registry>/nsfwdetector@sha256:… */
  image: string;
  digest: string;
  /** oci://<registry>/charts/nsfwdetector */
  chart: string;
  chartVersion: string;
  /** Helm values naming the three images by digest. */
  valuesFile: string;
}

let pushed: Promise<NodeImages> | undefined;

/** npm run kube:image, once for every suite on the node; prints its `kube-image:` lines. */
export function pushImages(facts: KubeNodeFacts): Promise<NodeImages> {
  pushed ??= runImageScript(facts);
  return pushed;
}

async function runImageScript(facts: KubeNodeFacts): Promise<NodeImages> {
  const out = await runNodeScript('image.sh');
  console.log(
    out
      .split('\n')
      .filter((l) => l.startsWith('kube-image:'))
      .map((l) => `kube-node: ${l}`)
      .join('\n'),
  );
  const image = lastLine(out);
  expect(image).toMatch(new RegExp(`^${facts.registry}/nsfwdetector@sha256:[0-9a-f]{64}$`));
  const chart = /kube-image: chart (oci:\/\/\S+) --version (\S+)/.exec(out);
  if (!chart) throw new Error(`kube:image printed no chart reference:\n${out}`);
  return {
    image,
    digest: image.split('@')[1] as string,
    chart: chart[1] as string,
    chartVersion: chart[2] as string,
    valuesFile: join(facts.stateDir, 'image-values.yaml'),
  };
}

/**
 * `helm install` of the pushed chart (oci://…) with the pushed images and tools/kube-node/values-node.yaml,
 * then `valuesFiles` and `set`, waiting for every workload.
 */
export async function installChart(
  facts: KubeNodeFacts,
  images: NodeImages,
  opts: { release: string; namespace: string; valuesFiles?: string[]; set?: Record<string, string> },
): Promise<void> {
  const args = [
    'install',
    opts.release,
    images.chart,
    '--version',
    images.chartVersion,
    '--namespace',
    opts.namespace,
    '--create-namespace',
    '--plain-http',
    '-f',
    images.valuesFile,
    '-f',
    join(SCRIPTS, 'values-node.yaml'),
  ];
  for (const file of opts.valuesFiles ?? []) args.push('-f', file);
  for (const [k, v] of Object.entries(opts.set ?? {})) args.push('--set', `${k}=${v}`);
  // Seconds when the node is healthy (11–20 s here): minutes mean it is not, and the report says why.
  await nodeWait(facts, opts.namespace, helmOnNode(facts, [...args, '--wait', '--timeout', '5m']));
}

/** `wait` on the node; when it fails, its error says what the node says of `namespace` (reportingWait). */
export function nodeWait<T>(facts: KubeNodeFacts, namespace: string, wait: Promise<T>): Promise<T> {
  return reportingWait(wait, (args) => kubectl(facts, args), namespace);
}

/**
 * What a suite installed, gone: the custom resources first (the operator releases their finalizers), the
 * release, then its namespace and everything left in it (PVCs), waited for, so the next suite starts on
 * an empty node.
 */
export async function removeRelease(facts: KubeNodeFacts, release: string, namespace: string): Promise<void> {
  const k = (...args: string[]) => kubectl(facts, ['-n', namespace, ...args]);
  const crds = await kubectl(facts, ['get', 'crd', '-o', 'name']);
  for (const kind of ['apiaccounts', 'detectionpolicies'])
    if (crds.includes(`/${kind}.`)) await k('delete', kind, '--all', '--wait', '--timeout=120s');
  const releases = await helmOnNode(facts, ['list', '--namespace', namespace, '-q']);
  if (releases.split('\n').includes(release))
    await helmOnNode(facts, ['uninstall', release, '--namespace', namespace, '--wait', '--timeout', '5m']);
  await kubectl(facts, ['delete', 'namespace', namespace, '--ignore-not-found', '--wait', '--timeout=300s']);
}

/** Pushes `tag` for the image already in the registry at `digest` (its manifest under a second name). */
export async function tagInRegistry(facts: KubeNodeFacts, digest: string, tag: string): Promise<void> {
  const base = `http://${facts.registry}/v2/nsfwdetector/manifests`;
  const accept = [
    'application/vnd.oci.image.index.v1+json',
    'application/vnd.oci.image.manifest.v1+json',
    'application/vnd.docker.distribution.manifest.list.v2+json',
    'application/vnd.docker.distribution.manifest.v2+json',
  ].join(', ');
  const manifest = await fetch(`${base}/${digest}`, { headers: { accept } });
  expect(manifest.status).toBe(200);
  const put = await fetch(`${base}/${tag}`, {
    method: 'PUT',
    headers: { 'content-type': manifest.headers.get('content-type') ?? '' },
    body: await manifest.arrayBuffer(),
  });
  expect(put.status, await put.text()).toBe(201);
}

/** The machine's state kube:down must restore, taken before kube:up. */
export interface HostBefore {
  sysctls: Record<string, string>;
  paths: Record<string, boolean>;
  nftTables: string[];
}

/**
 * kube:up on a clean machine (checked first); prints its milestones. On a machine that has built
 * nothing, it first waits for the node's components that .ci/run builds in the background.
 */
export async function bringUp(facts: KubeNodeFacts, nodes = 1): Promise<HostBefore> {
  expect(nodeLeftovers(facts), 'the machine has the node running or its remains before kube:up').toEqual([]);
  const before = { sysctls: hostSysctls(), paths: hostPaths(), nftTables: hostNftTables() };
  const waited = performance.now();
  if (facts.building) console.log('kube-node: waiting for the build of its components under way');
  const out = await runNodeScript('up.sh', {}, ['--nodes', String(nodes)]);
  if (facts.building)
    console.log(
      `kube-node: kube:up, with the wait for the build, took ${((performance.now() - waited) / 1000).toFixed(1)} s`,
    );
  console.log(
    out
      .split('\n')
      .filter((l) => l.includes('kube-node: ['))
      .join('\n'),
  );
  expect(lastLine(out)).toBe(`KUBECONFIG=${facts.kubeconfig}`);
  return before;
}

/** kube:down, and helm's temp home (made by the suites' helm calls) removed. */
export async function takeDown(): Promise<void> {
  removeHelmHome();
  await runNodeScript('down.sh');
}

/** kube:down, then nothing of the node left and the host as it was before kube:up. */
export async function bringDown(facts: KubeNodeFacts, before: HostBefore): Promise<void> {
  await takeDown();
  expect(nodeLeftovers(facts)).toEqual([]);
  expect(hostSysctls()).toEqual(before.sysctls);
  expect(hostPaths()).toEqual(before.paths);
  expect(hostNftTables()).toEqual(before.nftTables);
}

/** Runs tools/kube-node/<script>; resolves with its output, rejects with it on a non-zero exit. */
export async function runNodeScript(
  script: 'up.sh' | 'down.sh' | 'image.sh' | 'lose-node.sh',
  env: NodeJS.ProcessEnv = {},
  args: string[] = [],
): Promise<string> {
  const child = spawnChild(`kube-node ${script}`, 'bash', [join(SCRIPTS, script), ...args], {
    cwd: REPO,
    env: { ...process.env, ...env },
  });
  const code = await child.exited;
  if (code !== 0) throw new Error(`tools/kube-node/${script} exited with ${code}:\n${child.output()}`);
  return child.output();
}

/** The last line of a script's output. */
export function lastLine(output: string): string {
  return output.trimEnd().split('\n').at(-1) ?? '';
}

function sh(command: string, args: string[]): string {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

/**
 * Whether a process's command line is the node's: it names one of the node's binaries or directories as a
 * whole path (so a background build's `go build -o <binary>.tmp` is not). etcd, kube-apiserver and kubectl
 * are not counted (the chart suites run them too), nor the Debian binaries.
 */
export function isNodeProcess(
  facts: Pick<KubeNodeFacts, 'binaries' | 'nodeDir' | 'runDir'>,
  cmdline: string,
): boolean {
  const shared = /\/(etcd|kube-apiserver|kubectl)[^/]*$/;
  const dirs = [facts.nodeDir, facts.runDir];
  const ours = (path: string) =>
    (facts.binaries.includes(path) && !path.startsWith('/usr/') && !shared.test(path)) ||
    dirs.some((d) => path === d || path.startsWith(`${d}/`));
  // Paths stand between spaces, quotes (a `sh -c` script), `=` (--flag=path) and list separators.
  return cmdline.split(/[\s'"=,:]+/).some(ours);
}

/** Everything of the node's left on this machine, one line each; empty when the machine is clean. */
export function nodeLeftovers(facts: KubeNodeFacts): string[] {
  const left: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ');
    } catch {
      continue;
    }
    if (isNodeProcess(facts, cmdline)) left.push(`process ${pid}: ${cmdline.slice(0, 160)}`);
  }
  // node 1's bridge and the host ends of the other nodes' veth pairs (nsfwkube<N>), pods' veths
  for (const link of readdirSync('/sys/class/net').filter(
    (l) => l === facts.bridge || l.startsWith('nsfwkube') || l.startsWith('veth'),
  ))
    left.push(`network link ${link}`);
  // pods' (cni-…) and the other nodes' (nsfwkube-node<N>)
  for (const ns of sh('ip', ['netns', 'list'])
    .split('\n')
    .filter((l) => l.startsWith('cni-') || l.startsWith('nsfwkube-')))
    left.push(`network namespace ${ns}`);
  // the routes to the pod subnets and the node links (10.244.0.0/16, 10.243.0.0/16), and their blackholes
  for (const route of sh('ip', ['route', 'show'])
    .split('\n')
    .filter((l) => /^(blackhole )?10\.24[34]\./.test(l)))
    left.push(`route ${route}`);
  // Chains named KUBE-*, and rules in the built-in chains that jump to them or name them in a comment.
  for (const save of ['iptables-save', 'ip6tables-save'])
    for (const line of sh(save, [])
      .split('\n')
      .filter((l) => /KUBE-|kube-router/.test(l)))
      left.push(`${save}: ${line}`);
  for (const set of sh('ipset', ['list', '-n'])
    .split('\n')
    .filter((s) => /^(KUBE-|kube-router)/.test(s)))
    left.push(`ipset ${set}`);
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const point = line.split(' ')[4];
    if (point && [facts.nodeDir, facts.runDir, facts.dockerData].some((d) => point.startsWith(d)))
      left.push(`mount ${point}`);
  }
  // node 1's kubepods, the other nodes' cgroup roots
  for (const controller of readdirSync('/sys/fs/cgroup')) {
    if (existsSync(`/sys/fs/cgroup/${controller}/kubepods`)) left.push(`cgroup ${controller}/kubepods`);
    try {
      for (const root of readdirSync(`/sys/fs/cgroup/${controller}`).filter((d) => d.startsWith('nsfwkube-')))
        left.push(`cgroup ${controller}/${root}`);
    } catch {
      // not a directory (a file at the cgroup root)
    }
  }
  if (existsSync(facts.runDir)) left.push(`directory ${facts.runDir}`);
  if (existsSync(facts.stateDir)) left.push(`directory ${facts.stateDir}`);
  return left;
}

/** Whether each fixed path a node's components default to exists (kube:down leaves them as they were). */
export function hostPaths(): Record<string, boolean> {
  const paths = [
    '/run/containerd',
    '/run/containerd/s',
    '/var/log/containers',
    '/var/log/pods',
    '/var/lib/kubelet',
    '/var/lib/cni',
    '/etc/cni',
    '/opt/containerd',
    '/var/run/nri',
    '/etc/kubernetes',
    '/var/lib/containerd',
    '/run/netns',
  ];
  // ip netns makes /run/netns a mount of its own
  const netnsMounted = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === '/run/netns');
  return {
    ...Object.fromEntries(paths.map((p) => [p, existsSync(p)])),
    '/run/netns (a mount)': netnsMounted,
  };
}

/** The host settings kube:up changes (kube:down restores them). */
export function hostSysctls(): Record<string, string> {
  const read = (path: string) => (existsSync(path) ? readFileSync(path, 'utf8').trim() : 'absent');
  return {
    'net.ipv4.ip_forward': read('/proc/sys/net/ipv4/ip_forward'),
    'net.bridge.bridge-nf-call-iptables': read('/proc/sys/net/bridge/bridge-nf-call-iptables'),
    'vm.overcommit_memory': read('/proc/sys/vm/overcommit_memory'),
    'kernel.panic': read('/proc/sys/kernel/panic'),
    'kernel.panic_on_oops': read('/proc/sys/kernel/panic_on_oops'),
  };
}

/** The nf_tables tables on this machine (`family name`), sorted; kube:down removes those the node made. */
export function hostNftTables(): string[] {
  return sh('nft', ['list', 'tables'])
    .split('\n')
    .filter(Boolean)
    .map((l) => l.replace(/^table /, ''))
    .sort();
}

/**
 * A pod running the service image idle (node is all it needs), on `node` when given, not labelled as any of
 * the chart's: the source of the NetworkPolicy checks.
 */
export async function startProbe(
  facts: KubeNodeFacts,
  images: NodeImages,
  ns: string,
  node?: string,
): Promise<void> {
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'probe', namespace: ns, labels: { app: 'probe' } },
    spec: {
      ...(node ? { nodeName: node } : {}),
      terminationGracePeriodSeconds: 0,
      securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
      containers: [
        {
          name: 'probe',
          image: images.image,
          args: ['-e', 'setInterval(() => {}, 1 << 30)'],
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'] },
          },
          resources: { requests: { cpu: '10m', memory: '32Mi' } },
        },
      ],
    },
  };
  await kubectl(facts, ['apply', '-f', '-'], JSON.stringify(pod));
  await kubectl(facts, ['-n', ns, 'wait', '--for=condition=Ready', 'pod/probe', '--timeout=120s']);
}

// Connects to each target from inside a pod: "open" when the TCP handshake completes within 3 s.
const PROBE_SCRIPT = `
const net = require('node:net');
const targets = JSON.parse(process.argv[1]);
Promise.all(Object.entries(targets).map(([name, t]) => new Promise((resolve) => {
  const socket = net.connect({ host: t.host, port: t.port });
  const done = (state) => { socket.destroy(); resolve([name, state]); };
  socket.setTimeout(3000, () => done('closed'));
  socket.on('connect', () => done('open'));
  socket.on('error', () => done('closed'));
}))).then((states) => console.log(JSON.stringify(Object.fromEntries(states))));
`;

/** What a pod (`where`: kubectl exec's pod and container arguments) can connect to: "open" or "closed" each. */
export async function probe(
  facts: KubeNodeFacts,
  where: string[],
  targets: Record<string, { host: string; port: number }>,
): Promise<Record<string, string>> {
  const out = await kubectl(facts, [
    'exec',
    ...where,
    '--',
    'node',
    '-e',
    PROBE_SCRIPT,
    JSON.stringify(targets),
  ]);
  return JSON.parse(lastLine(out));
}
