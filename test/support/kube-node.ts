// The local single-node Kubernetes cluster (tools/kube-node: npm run kube:up / kube:down / kube:image)
// for the node suites: its facts, `describeWithKubeNode`, the scripts run as children, and the list of
// anything of the node's still on the machine (processes, bridge, iptables chains, ipsets, mounts,
// cgroups, pod network namespaces).

import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnChild } from './children.ts';
import { describeWithTool, type Tool } from './tools.ts';

const REPO = new URL('../../', import.meta.url).pathname;
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
}

export function kubeNodeFacts(): KubeNodeFacts {
  return JSON.parse(execFileSync('bash', [join(SCRIPTS, 'describe.sh')], { encoding: 'utf8' }));
}

const INSTALL = 'bash .ci/install-k8s-tools.sh --node, as root (about 20 CPU-minutes the first time)';

/** The node's components, built, and root to run them. */
export const KUBE_NODE: Tool = {
  name: 'the local Kubernetes node (root and its built components)',
  install: INSTALL,
  find: () => (process.getuid?.() === 0 && kubeNodeFacts().missing.length === 0 ? SCRIPTS : undefined),
};

export function describeWithKubeNode(name: string, body: () => void, also: Tool[] = []): void {
  describeWithTool([KUBE_NODE, ...also], name, body);
}

/** Runs tools/kube-node/<script>; resolves with its output, rejects with it on a non-zero exit. */
export async function runNodeScript(
  script: 'up.sh' | 'down.sh' | 'image.sh',
  env: NodeJS.ProcessEnv = {},
): Promise<string> {
  const child = spawnChild(`kube-node ${script}`, 'bash', [join(SCRIPTS, script)], {
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

/** Everything of the node's left on this machine, one line each; empty when the machine is clean. */
export function nodeLeftovers(facts: KubeNodeFacts): string[] {
  const left: string[] = [];
  // Its processes name its directories or binaries; not etcd, kube-apiserver and kubectl, which the chart
  // suites run too, nor the Debian binaries.
  const shared = /\/(etcd|kube-apiserver|kubectl)[^/]*$/;
  const ours = [
    ...facts.binaries.filter((b) => !b.startsWith('/usr/') && !shared.test(b)),
    facts.nodeDir,
    facts.runDir,
  ];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ');
    } catch {
      continue;
    }
    if (ours.some((path) => cmdline.includes(path))) left.push(`process ${pid}: ${cmdline.slice(0, 160)}`);
  }
  if (existsSync(`/sys/class/net/${facts.bridge}`)) left.push(`network link ${facts.bridge}`);
  for (const link of readdirSync('/sys/class/net').filter((l) => l.startsWith('veth')))
    left.push(`network link ${link}`);
  for (const ns of sh('ip', ['netns', 'list'])
    .split('\n')
    .filter((l) => l.startsWith('cni-')))
    left.push(`network namespace ${ns}`);
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
  for (const controller of readdirSync('/sys/fs/cgroup'))
    if (existsSync(`/sys/fs/cgroup/${controller}/kubepods`)) left.push(`cgroup ${controller}/kubepods`);
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
  ];
  return Object.fromEntries(paths.map((p) => [p, existsSync(p)]));
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
