// A real Kubernetes API server for the chart suite: etcd and kube-apiserver (built by
// .ci/install-k8s-tools.sh) on loopback, throwaway certificates from openssl, an admin kubeconfig, the
// PodSecurity admission plugin on. No controller-manager, scheduler or kubelet: objects are stored and
// admitted, but no pod ever runs (Deployments get no ReplicaSets, namespaces never finish deleting).

import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { Child, listeningPorts, waitFor } from '../../tools/stack/child.ts';
import { KUBE_TOOLS, requireTool } from './tools.ts';

const execFileAsync = promisify(execFile);

export type KubeTool = keyof typeof KUBE_TOOLS;

/** The pinned tool's path (tools.ts); throws with the install command when it is missing. */
export const requireKubeTool = (name: KubeTool): string => requireTool(KUBE_TOOLS[name]);

export interface KubeApiServer {
  /** https://127.0.0.1:<port> */
  url: string;
  /** An admin (system:masters) kubeconfig for kubectl and helm. */
  kubeconfig: string;
  /** Runs kubectl with the admin kubeconfig; rejects with stderr on a non-zero exit. */
  kubectl(args: string[], opts?: { input?: string }): Promise<{ stdout: string; stderr: string }>;
  /**
   * Stops the kube-apiserver process (SIGTERM, then SIGKILL; etcd keeps running) and starts it again on the same port
   * with the same certificates, resolving once /readyz answers: clients see their watches end and
   * their connections refused for a while (at least `downMs`), then the same server (and data) again.
   */
  restart(opts?: { downMs?: number }): Promise<void>;
  stop(): Promise<void>;
}

async function openssl(dir: string, args: string[]): Promise<void> {
  await execFileAsync('openssl', args, { cwd: dir });
}

/** A CA, a serving certificate for 127.0.0.1, an admin client in system:masters, a service-account key pair. */
async function makeCertificates(dir: string): Promise<void> {
  const day = ['-days', '2'];
  await openssl(dir, [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    ...day,
    '-subj',
    '/CN=nsfwdetector-test-ca',
  ]);
  writeFileSync(
    join(dir, 'server.ext'),
    'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n',
  );
  writeFileSync(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const [name, subject, ext] of [
    ['server', '/CN=kube-apiserver', 'server.ext'],
    ['admin', '/O=system:masters/CN=admin', 'client.ext'],
  ] as const) {
    await openssl(dir, [
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      subject,
    ]);
    await openssl(dir, [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      ...day,
      '-extfile',
      ext,
    ]);
  }
  await openssl(dir, ['genrsa', '-out', 'sa.key', '2048']);
  await openssl(dir, ['rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub']);
}

function kubeconfigYaml(dir: string, url: string): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: { server: "${url}", certificate-authority: "${join(dir, 'ca.crt')}" }
users:
  - name: admin
    user: { client-certificate: "${join(dir, 'admin.crt')}", client-key: "${join(dir, 'admin.key')}" }
contexts:
  - name: test
    context: { cluster: test, user: admin }
current-context: test
`;
}

/** A kubeconfig (removed at stop) that authenticates with a bearer token, e.g. a ServiceAccount's. */
export function tokenKubeconfig(kube: KubeApiServer, token: string): string {
  const dir = dirname(kube.kubeconfig);
  const path = join(dir, `token-kubeconfig-${Math.random().toString(16).slice(2)}`);
  writeFileSync(
    path,
    `apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: { server: "${kube.url}", certificate-authority: "${join(dir, 'ca.crt')}" }
users:
  - name: token
    user: { token: "${token}" }
contexts:
  - name: test
    context: { cluster: test, user: token }
current-context: test
`,
    { mode: 0o600 },
  );
  return path;
}

/** Runs kubectl with `kubeconfig`; rejects with stderr on a non-zero exit. */
export function kubectlWith(
  kubeconfig: string,
  args: string[],
  opts: { input?: string } = {},
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      requireKubeTool('kubectl'),
      ['--kubeconfig', kubeconfig, ...args],
      { maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`kubectl ${args.join(' ')} failed: ${stderr || err.message}`));
        else resolve({ stdout, stderr });
      },
    );
    child.stdin?.end(opts.input ?? '');
  });
}

const AUDIT_POLICY_FILE = 'audit-policy.yaml';
/** Metadata of every request made with a ServiceAccount's credentials; nothing else. */
const AUDIT_POLICY = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
`;

/** The audit log (JSON lines) of a server started with `audit: true`. */
export function auditLogOf(kube: KubeApiServer): string {
  return join(dirname(kube.kubeconfig), 'audit.log');
}

/** The audit flags when the server's directory holds the audit policy (startKubeApiServer's `audit`). */
function auditFlags(dir: string): string[] {
  if (!existsSync(join(dir, AUDIT_POLICY_FILE))) return [];
  return [
    `--audit-policy-file=${join(dir, AUDIT_POLICY_FILE)}`,
    `--audit-log-path=${join(dir, 'audit.log')}`,
  ];
}

/** etcd on loopback port 0 (the port is read from /proc), no fsync (tests only). */
async function startEtcd(dir: string): Promise<{ child: Child; url: string }> {
  const any = 'http://127.0.0.1:0';
  const child = new Child({
    name: 'etcd',
    command: requireKubeTool('etcd'),
    args: [
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${any}`,
      `--advertise-client-urls=${any}`,
      `--listen-peer-urls=${any}`,
      `--initial-advertise-peer-urls=${any}`,
      `--initial-cluster=default=${any}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ],
  });
  // Two listeners (client and peer); the client one answers /health.
  const url = await waitFor(
    child,
    'etcd to listen',
    async () => {
      for (const port of listeningPorts(child.pid)) {
        const res = await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined);
        if (res?.ok) return `http://127.0.0.1:${port}`;
      }
      return undefined;
    },
    60_000,
  );
  return { child, url };
}

/**
 * kube-apiserver cannot listen on port 0 (0 switches secure serving off), so it gets a random high port
 * and proves it holds it: a bind failure is seen in its output and another port is tried. A restart
 * passes the port it had (`samePort`): then a bind failure is an error.
 */
async function startApiServer(
  dir: string,
  etcdUrl: string,
  samePort?: number,
): Promise<{ child: Child; url: string; port: number }> {
  for (let attempt = 0; ; attempt++) {
    const port = samePort ?? 20_000 + Math.floor(Math.random() * 30_000);
    const child = new Child({
      name: 'kube-apiserver',
      command: requireKubeTool('kube-apiserver'),
      args: [
        `--etcd-servers=${etcdUrl}`,
        '--bind-address=127.0.0.1',
        '--advertise-address=127.0.0.1',
        `--secure-port=${port}`,
        // No kubelet-backed endpoints of its own: the default Service's endpoints are not maintained.
        '--endpoint-reconciler-type=none',
        `--cert-dir=${join(dir, 'apiserver-certs')}`,
        `--tls-cert-file=${join(dir, 'server.crt')}`,
        `--tls-private-key-file=${join(dir, 'server.key')}`,
        `--client-ca-file=${join(dir, 'ca.crt')}`,
        `--service-account-key-file=${join(dir, 'sa.pub')}`,
        `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
        '--service-account-issuer=https://kubernetes.default.svc',
        '--service-cluster-ip-range=10.96.0.0/16',
        '--authorization-mode=RBAC',
        // OwnerReferencesPermissionEnforcement as on hardened clusters: an owner reference that blocks its
        // owner's deletion needs update on the owner's finalizers (the operator's RBAC must say so).
        '--enable-admission-plugins=PodSecurity,OwnerReferencesPermissionEnforcement',
        ...auditFlags(dir),
        '--storage-media-type=application/json',
        '--v=0',
      ],
    });
    const url = `https://127.0.0.1:${port}`;
    try {
      await waitFor(
        child,
        'kube-apiserver to listen',
        () => (listeningPorts(child.pid).includes(port) ? true : undefined),
        120_000,
      );
      return { child, url, port };
    } catch (err) {
      await child.stop(2_000);
      if (samePort === undefined && attempt < 5 && /address already in use/.test(child.output())) continue;
      throw err;
    }
  }
}

/** `audit`: the server writes an audit log of ServiceAccount requests (auditLogOf). */
export async function startKubeApiServer(opts: { audit?: boolean } = {}): Promise<KubeApiServer> {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-kube-'));
  const children: Child[] = [];
  const stop = async () => {
    for (const child of children.reverse()) await child.stop(10_000);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    if (opts.audit) writeFileSync(join(dir, AUDIT_POLICY_FILE), AUDIT_POLICY);
    await makeCertificates(dir);
    const etcd = await startEtcd(dir);
    children.push(etcd.child);
    let api = await startApiServer(dir, etcd.url);
    children.push(api.child);
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kubeconfigYaml(dir, api.url));
    const kubectl: KubeApiServer['kubectl'] = (args, options = {}) => kubectlWith(kubeconfig, args, options);

    // Ready: /readyz through the admin credentials (bootstrap RBAC and priority classes done).
    const ready = () =>
      waitFor(
        api.child,
        'kube-apiserver /readyz',
        async () => {
          try {
            const { stdout } = await kubectl(['get', '--raw', '/readyz']);
            return stdout.trim() === 'ok' ? true : undefined;
          } catch {
            return undefined;
          }
        },
        120_000,
      );
    await ready();
    const restart = async (opts: { downMs?: number } = {}) => {
      // SIGTERM, SIGKILL after 3 s: its graceful shutdown holds open watches far longer.
      await api.child.stop(3_000);
      children.splice(children.indexOf(api.child), 1);
      await new Promise((r) => setTimeout(r, opts.downMs ?? 0));
      api = await startApiServer(dir, etcd.url, api.port);
      children.push(api.child);
      await ready();
    };
    return { url: api.url, kubeconfig, kubectl, restart, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
