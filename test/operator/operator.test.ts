// The operator against a real kube-apiserver + etcd and a real redis-server: the CRDs as the chart
// ships them, the operator and the quota/detect servers as child processes. No kubelet runs: the
// mounted policy file is written here the way the kubelet writes a ConfigMap volume (a new timestamped
// directory, then an atomic rename of the `..data` symlink), and the detect process is made an endpoint
// of its Service by an EndpointSlice written the way the EndpointSlice controller writes one.

import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import sharp from 'sharp';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SETTINGS } from '../../lib/common/settings.ts';
import { detectionPolicyManifest } from '../../tools/calibrate/report.ts';
import { CHART_DIR, helm, removeHelmHome, sets } from '../chart/helm.ts';
import { fixture } from '../fixtures/corpus.ts';
import { animationOf } from '../support/animations.ts';
import { describeWithKube } from '../support/describe-kube.ts';
import { eventually } from '../support/eventually.ts';
import { type KubeApiServer, startKubeApiServer } from '../support/kube-apiserver.ts';
import { policyMount } from '../support/policy-mount.ts';
import { startQuotaServer } from '../support/quota-process.ts';
import { RedisServer } from '../support/redis-server.ts';
import { ROOT, type ServerProcess, spawnOperator, spawnService } from '../support/server-process.ts';
import { REDIS_SERVER } from '../support/tools.ts';

const CRDS = join(ROOT, 'charts/nsfwdetector/crds');
/** The chart's detect Deployment for the release `nsfwdetector` (the operator is pointed at it). */
const DETECT = 'nsfwdetector-detect';
/** The Services whose ready pods must apply a policy before it is Ready (the chart names these). */
const POLICY_READERS = 'nsfwdetector-detect/http';
const JPEG = readFileSync(fixture('320x240.jpg'));

/** This machine's first non-loopback IPv4 address: an EndpointSlice may not name a loopback one. */
function hostAddress(): string {
  const address = Object.values(networkInterfaces())
    .flat()
    .find((a) => a?.family === 'IPv4' && !a.internal)?.address;
  if (!address) throw new Error('no non-loopback IPv4 address on this machine for the EndpointSlice');
  return address;
}

interface Cr {
  metadata: { generation: number; finalizers?: string[]; uid: string };
  status?: {
    observedGeneration?: number;
    conditions?: Array<{ type: string; status: string; observedGeneration?: number }>;
    keys?: Array<{ name: string; id: string; last4: string }>;
    accountId?: string;
  };
}

describeWithKube(
  'operator against a real API server and Redis',
  ['kube-apiserver', 'etcd', 'kubectl'],
  () => {
    let kube: KubeApiServer;
    let redis: RedisServer;
    let quota: ServerProcess;
    const operators: ServerProcess[] = [];
    const dirs: string[] = [];

    const kubectl = async (args: string[], input?: string) =>
      (await kube.kubectl(args, input ? { input } : {})).stdout;
    const getJson = async <T>(kind: string, name: string) =>
      JSON.parse(await kubectl(['get', kind, name, '-o', 'json'])) as T;
    const startOperator = (identity: string, env: Record<string, string> = {}) =>
      spawnOperator({
        kubeconfig: kube.kubeconfig,
        redisUrl: redis.url,
        identity,
        env: { OPERATOR_DETECT_DEPLOYMENT: DETECT, OPERATOR_POLICY_READERS: POLICY_READERS, ...env },
      }).then((p) => {
        operators.push(p);
        return p;
      });
    const leaseHolder = async () =>
      (await getJson<{ spec: { holderIdentity?: string } }>('lease', 'nsfwdetector-operator')).spec
        .holderIdentity;
    const authorize = async (secret: string) =>
      (
        await fetch(`${quota.url}/ext_authz/api/open/detect`, {
          method: 'POST',
          headers: { authorization: `Bearer ${secret}`, 'content-length': '0' },
        })
      ).status;

    beforeAll(async () => {
      kube = await startKubeApiServer();
      redis = await RedisServer.start();
      await kubectl(['apply', '--server-side', '-f', CRDS]);
      await kubectl(['wait', '--for=condition=Established', 'crd', '--all', '--timeout=60s']);
      quota = await startQuotaServer({ REDIS_URL: redis.url });
      await startOperator('operator-a');
    }, 300_000);

    afterAll(async () => {
      for (const p of operators) await p.stop();
      await quota?.stop();
      await redis?.stop();
      await kube?.stop();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
      removeHelmHome();
    }, 120_000);

    const policy = (allow: number, block: number, name = 'main') => `apiVersion: nsfwdetector.io/v1alpha1
kind: DetectionPolicy
metadata: { name: ${name}, namespace: default }
spec:
  thresholds: { allow: ${allow}, block: ${block} }
`;
    const readyFor = async (name: string, generation: number) =>
      await eventually(`DetectionPolicy ${name} Ready for generation ${generation}`, async () => {
        const cr = await getJson<Cr>('detectionpolicy', name);
        const ready = cr.status?.conditions?.find((c) => c.type === 'Ready');
        return ready?.status === 'True' &&
          ready.observedGeneration === generation &&
          cr.status?.observedGeneration === generation
          ? cr
          : undefined;
      });

    it('refuses an invalid policy in the API server itself (CEL), with a clear message', async () => {
      await expect(kubectl(['apply', '-f', '-'], policy(0.9, 0.2, 'bad'))).rejects.toThrow(
        /thresholds.allow must be lower than thresholds.block/,
      );
      await expect(kubectl(['apply', '-f', '-'], policy(0.1, 1.5, 'bad'))).rejects.toThrow(
        /less than or equal to 1/,
      );
      // Frames scored: the setting's range (MAX_FRAMES_SCORED), a whole number.
      const frames = (n: number) => `${policy(0.1, 0.9, 'bad')}  maxFramesScored: ${n}\n`;
      const { min, max } = SETTINGS.MAX_FRAMES_SCORED;
      await expect(kubectl(['apply', '-f', '-'], frames(max + 1))).rejects.toThrow(
        new RegExp(
          `spec.maxFramesScored: Invalid value: ${max + 1}: spec.maxFramesScored in body should be less than or equal to ${max}`,
        ),
      );
      await expect(kubectl(['apply', '-f', '-'], frames(min - 1))).rejects.toThrow(
        /spec.maxFramesScored in body should be greater than or equal to 1/,
      );
      await expect(kubectl(['apply', '-f', '-'], frames(2.5))).rejects.toThrow(/spec.maxFramesScored/);
    });

    it("accepts the calibration report's DetectionPolicy manifest as it is (npm run calibrate)", async () => {
      const manifest = detectionPolicyManifest({ allow: 0.07, block: 0.93 });
      expect(await kubectl(['apply', '--dry-run=server', '-f', '-'], manifest)).toMatch(
        /detectionpolicy.nsfwdetector.io\/main (created|configured) \(server dry run\)/,
      );
    });

    let detect: ServerProcess;
    let mount: string;
    /** As the kubelet does: ..<ts>/policy.json, then `..data` swapped by rename, policy.json → ..data/policy.json. */
    const kubeletWrite = (text: string) => {
      const stamp = join(mount, `..${Date.now()}_${Math.random().toString(16).slice(2)}`);
      mkdirSync(stamp);
      writeFileSync(join(stamp, 'policy.json'), text);
      const tmp = join(mount, '..data_tmp');
      symlinkSync(stamp.split('/').pop() as string, tmp);
      renameSync(tmp, join(mount, '..data'));
    };
    const condition = async (type: string, generation: number) =>
      await eventually(`DetectionPolicy main ${type} for generation ${generation}`, async () => {
        const cr = await getJson<Cr>('detectionpolicy', 'main');
        const c = cr.status?.conditions?.find((x) => x.type === type) as
          | { type: string; status: string; reason: string; message: string; observedGeneration?: number }
          | undefined;
        return c?.observedGeneration === generation ? c : undefined;
      });
    const endpointSlice = (port: number) => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: nsfwdetector-detect-test
  namespace: default
  labels: { kubernetes.io/service-name: nsfwdetector-detect }
addressType: IPv4
ports: [{ name: http, port: ${port}, protocol: TCP }]
endpoints: [{ addresses: [${hostAddress()}], conditions: { ready: true }, targetRef: { kind: Pod, name: detect-test } }]
`;
    const configMapText = async () =>
      (await getJson<{ data: Record<string, string> }>('configmap', 'main-policy')).data[
        'policy.json'
      ] as string;
    const detectThresholds = async () => {
      const res = await fetch(`${detect.url}/api/public/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg', 'x-account-id': '-', 'x-quota-tier': 'anonymous' },
        body: JPEG,
      });
      expect(res.status).toBe(200);
      return ((await res.json()) as { data: { thresholds: unknown } }).data.thresholds;
    };
    /** Frames detect scores of an 8-frame GIF: 1 as configured, the policy's maxFramesScored once in force. */
    const detectFramesScored = async () => {
      const frames = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          sharp({ create: { width: 64, height: 64, channels: 3, background: { r: 32 * i, g: 128, b: 0 } } })
            .png()
            .toBuffer(),
        ),
      );
      const res = await fetch(`${detect.url}/api/public/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/gif', 'x-account-id': '-', 'x-quota-tier': 'anonymous' },
        body: new Uint8Array(await animationOf('gif', frames)),
      });
      expect(res.status).toBe(200);
      return ((await res.json()) as { data: { image: { frames_scored: number } } }).data.image.frames_scored;
    };

    it('renders a policy into a ConfigMap owned by it, status Ready with observedGeneration; `kubectl wait` works', async () => {
      await kubectl(['apply', '-f', '-'], policy(0.2, 0.8));
      await kubectl(['wait', '--for=condition=Ready', 'detectionpolicy/main', '--timeout=60s']);
      const cr = await readyFor('main', 1);
      const cm = JSON.parse(
        await kubectl(['get', 'configmap', 'main-policy', '--show-managed-fields', '-o', 'json']),
      ) as {
        metadata: {
          ownerReferences: Array<{ uid: string; kind: string; controller: boolean }>;
          managedFields: Array<{ manager: string }>;
        };
      };
      expect(cm.metadata.ownerReferences).toEqual([
        expect.objectContaining({ kind: 'DetectionPolicy', uid: cr.metadata.uid, controller: true }),
      ]);
      expect(cm.metadata.managedFields.map((f) => f.manager)).toContain('nsfwdetector-operator');
      // What the policy states and nothing else: the API server fills in no defaults of its own.
      expect(JSON.parse(await configMapText())).toEqual({
        source: { name: 'main', generation: 1 },
        thresholds: { allow: 0.2, block: 0.8 },
      });
      const events = await kubectl([
        'get',
        'events',
        '--field-selector',
        'involvedObject.name=main',
        '-o',
        'json',
      ]);
      expect(events).toContain('Rendered');
      const columns = await kubectl(['get', 'detectionpolicies']);
      expect(columns).toMatch(/NAME\s+ALLOW\s+BLOCK\s+MODEL\s+READY\s+AGE/);
      // No model column: the policy names none (the deployment's MODEL applies).
      expect(columns).toMatch(/main\s+0.2\s+0.8\s+True/);
    });

    it('leaves every limit as configured when the policy states only its thresholds (the spec’s numbers; the chart’s values where set)', async () => {
      const stored = await getJson<{ spec: unknown }>('detectionpolicy', 'main');
      expect(stored.spec).toEqual({ thresholds: { allow: 0.2, block: 0.8 } });
      const file = policyMount(await configMapText());
      const quotas: ServerProcess[] = [];
      try {
        // The chart's defaults, and values an operator set: the quota container's env as the chart renders it.
        const chartEnv = async (values: Record<string, string | number>) => {
          const gateway = await helm([
            'template',
            'nsfwdetector',
            CHART_DIR,
            '--show-only',
            'templates/gateway-deployment.yaml',
            ...sets(values),
          ]);
          expect(gateway.code, gateway.stderr).toBe(0);
          const policyVars = Object.entries(SETTINGS)
            .filter(([, s]) => s.section === 'policy' && 'chart' in s)
            .map(([name]) => name);
          return Object.fromEntries(
            [...gateway.stdout.matchAll(/- \{ name: ([A-Z_]+), value: "([^"]*)" \}/g)]
              .filter((m) => policyVars.includes(m[1] as string))
              .map((m) => [m[1] as string, m[2] as string]),
          );
        };
        const inForce = async (env: Record<string, string>) => {
          const quota = await startQuotaServer({ ...env, REDIS_URL: redis.url, POLICY_FILE: file.file });
          quotas.push(quota);
          const res = await fetch(`${quota.url}/internal/policy`);
          return ((await res.json()) as { data: unknown }).data;
        };
        const defaults = await chartEnv({});
        expect(defaults).toMatchObject({ ANON_PER_MINUTE: '10', ANON_PER_DAY: '30', PRO_PER_DAY: '10000' });
        expect(await inForce(defaults)).toEqual({
          source: { name: 'main', generation: 1 },
          inForce: {
            thresholds: { allow: 0.2, block: 0.8 },
            limits: {
              anonymous: { perMinute: 10, perDay: 30 },
              tiers: { free: { perMinute: 10, perDay: 100 }, pro: { perMinute: 30, perDay: 10_000 } },
            },
            maxFileBytes: 52_428_800,
          },
        });
        const set = await chartEnv({
          'config.anonPerDay': 50,
          'config.freePerMinute': 20,
          'config.proPerDay': 20_000,
          'config.maxFileBytes': 1_000_000,
        });
        expect(await inForce(set)).toEqual({
          source: { name: 'main', generation: 1 },
          inForce: {
            thresholds: { allow: 0.2, block: 0.8 },
            limits: {
              anonymous: { perMinute: 10, perDay: 50 },
              tiers: { free: { perMinute: 20, perDay: 100 }, pro: { perMinute: 30, perDay: 20_000 } },
            },
            maxFileBytes: 1_000_000,
          },
        });
      } finally {
        for (const q of quotas) await q.stop();
        file.remove();
      }
    }, 120_000);

    it('follows a threshold and frames change: ConfigMap and status, and detect answers with them on its next request', async () => {
      mount = mkdtempSync(join(tmpdir(), 'nsfwdetector-policy-'));
      dirs.push(mount);
      kubeletWrite(await configMapText());
      symlinkSync('..data/policy.json', join(mount, 'policy.json'));
      detect = await spawnService({
        entry: 'services/detect/server.ts',
        portVar: 'DETECT_PORT',
        // On every address: the operator reaches it at the EndpointSlice's (not loopback) address.
        env: { POLICY_FILE: join(mount, 'policy.json'), HOST: '0.0.0.0' },
      });
      operators.push(detect);
      expect(await detectThresholds()).toEqual({ allow: 0.2, block: 0.8 });
      expect(await detectFramesScored()).toBe(1);
      // The detect process, a ready endpoint of the detect Service (the operator asks it what it applies).
      await kubectl(['apply', '-f', '-'], endpointSlice(detect.port));

      await kubectl([
        'patch',
        'detectionpolicy',
        'main',
        '--type=merge',
        '-p',
        '{"spec":{"thresholds":{"allow":0.3,"block":0.6},"maxFramesScored":8}}',
      ]);
      const text = await eventually('the ConfigMap to follow', async () => {
        const t = await configMapText();
        return JSON.parse(t).thresholds.allow === 0.3 ? t : undefined;
      });
      expect(JSON.parse(text).maxFramesScored).toBe(8);
      // Rendered but not in force: the kubelet has not written the file yet, detect applies generation 1.
      const applying = await eventually('Progressing (Applying) for generation 2', async () => {
        const c = await condition('Progressing', 2);
        return c.status === 'True' ? c : undefined;
      });
      expect(applying.reason).toBe('Applying');
      expect(applying.message).toContain('0 of 1 ready pod(s) apply generation 2');
      expect((await condition('Ready', 2)).status).toBe('False');
      expect(await detectThresholds()).toEqual({ allow: 0.2, block: 0.8 });
      kubeletWrite(text);
      // Ready means in force: the very next request has the new thresholds.
      await kubectl(['wait', '--for=condition=Ready', 'detectionpolicy/main', '--timeout=60s']);
      await readyFor('main', 2);
      expect(await detectThresholds()).toEqual({ allow: 0.3, block: 0.6 });
      expect(await detectFramesScored()).toBe(8);

      // An invalid file keeps the last good policy.
      kubeletWrite('{"thresholds": {"allow": 0.9, "block": 0.1}}');
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await detectThresholds()).toEqual({ allow: 0.3, block: 0.6 });
      expect(detect.output()).toMatch(/policy file invalid; keeping the last good policy/);
      // The pod leaves the Service: the checks below run without one (Ready follows the ConfigMap).
      await kubectl(['delete', 'endpointslice', 'nsfwdetector-detect-test']);
    }, 240_000);

    it('marks a second policy Degraded (Superseded) and leaves the ConfigMap to the first', async () => {
      await kubectl(['apply', '-f', '-'], policy(0.05, 0.95, 'second'));
      await eventually('second to be Superseded', async () => {
        const cr = await getJson<Cr>('detectionpolicy', 'second');
        return cr.status?.conditions?.find((c) => c.type === 'Degraded' && c.status === 'True')
          ? cr
          : undefined;
      });
      await expect(kubectl(['get', 'configmap', 'second-policy'])).rejects.toThrow(/NotFound/);
      await kubectl(['delete', 'detectionpolicy', 'second']);
    });

    const account = (keys: string[]) => `apiVersion: nsfwdetector.io/v1alpha1
kind: ApiAccount
metadata: { name: acme, namespace: default }
spec:
  email: ops@acme.example
  tier: pro
  keys: [${keys.map((k) => `{ name: ${k} }`).join(', ')}]
`;
    const secretData = async () => {
      const s = await getJson<{ data: Record<string, string> }>('secret', 'acme-keys');
      return Object.fromEntries(
        Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
      );
    };

    let ciKey = '';
    let deployKey = '';
    it('issues ApiAccount keys into an owned Secret; they work against the quota service (real Redis)', async () => {
      await kubectl(['apply', '-f', '-'], account(['ci', 'deploy']));
      await kubectl(['wait', '--for=condition=Ready', 'apiaccount/acme', '--timeout=60s']);
      const cr = await getJson<Cr>('apiaccount', 'acme');
      expect(cr.metadata.finalizers).toContain('nsfwdetector.io/revoke-keys');
      const data = await secretData();
      ciKey = data.ci as string;
      deployKey = data.deploy as string;
      expect(ciKey).toMatch(/^nsk_live_[0-9a-f]{32}$/);
      expect(cr.status?.keys?.map((k) => k.name).sort()).toEqual(['ci', 'deploy']);
      expect(JSON.stringify(cr.status)).not.toContain(ciKey);
      expect(cr.status?.keys?.find((k) => k.name === 'ci')?.last4).toBe(ciKey.slice(-4));
      const secret = await getJson<{ metadata: { ownerReferences: Array<{ uid: string }> } }>(
        'secret',
        'acme-keys',
      );
      expect(secret.metadata.ownerReferences[0]?.uid).toBe(cr.metadata.uid);
      expect(await authorize(ciKey)).toBe(200);
      expect(await authorize(deployKey)).toBe(200);
      expect(await kubectl(['get', 'apiaccounts'])).toMatch(/acme\s+ops@acme.example\s+pro\s+2\s+True/);
    });

    it('revokes a key removed from the list on the next request (401)', async () => {
      await kubectl(['apply', '-f', '-'], account(['ci']));
      let seen = 0;
      await eventually('deploy to be refused', async () => {
        seen = await authorize(deployKey);
        if (seen !== 401) throw new Error(`deploy answered ${seen}`);
        return true;
      });
      expect(await authorize(ciKey)).toBe(200);
      await eventually(
        'the Secret to drop deploy',
        async () => ((await secretData()).deploy === undefined ? true : undefined),
        30_000,
      );
    }, 120_000);

    it('converges after the operator is killed and restarted (and two operators elect one leader)', async () => {
      const first = operators[0] as ServerProcess;
      first.proc.kill('SIGKILL');
      await first.exited;
      // Changed while no operator runs: the restarted ones see the state, not the missed events.
      await kubectl([
        'patch',
        'detectionpolicy',
        'main',
        '--type=merge',
        '-p',
        '{"spec":{"thresholds":{"allow":0.25}}}',
      ]);
      const b = await startOperator('operator-b');
      const c = await startOperator('operator-c');
      await readyFor('main', 3);
      const holder = await leaseHolder();
      expect(['operator-b', 'operator-c']).toContain(holder);
      const [leader, standby] = holder === 'operator-b' ? [b, c] : [c, b];
      expect(leader.output()).toContain('became leader');
      expect(standby.output()).not.toContain('became leader');
      // Failover: the leader is killed; the standby takes the Lease once it expires.
      leader.proc.kill('SIGKILL');
      await leader.exited;
      await eventually(
        'the standby to take over',
        async () =>
          (await leaseHolder()) === (holder === 'operator-b' ? 'operator-c' : 'operator-b')
            ? true
            : undefined,
        30_000,
      );
      await kubectl([
        'patch',
        'detectionpolicy',
        'main',
        '--type=merge',
        '-p',
        '{"spec":{"thresholds":{"allow":0.15}}}',
      ]);
      await readyFor('main', 4);
      const metrics = await (await fetch(`${standby.url}/metrics`)).text();
      expect(metrics).toMatch(/nsfwdetector_operator_reconciles_total\{[^}]*kind="DetectionPolicy"/);
      expect(metrics).toMatch(/nsfwdetector_operator_leader\{[^}]*\} 1/);
    }, 120_000);

    it('revokes every key and releases the finalizer when the ApiAccount is deleted', async () => {
      const accountId = (await getJson<Cr>('apiaccount', 'acme')).status?.accountId;
      expect(accountId).toMatch(/^acc_[0-9a-f]{16}$/);
      await kubectl(['delete', 'apiaccount', 'acme', '--timeout=60s']);
      await expect(kubectl(['get', 'apiaccount', 'acme'])).rejects.toThrow(/NotFound/);
      expect(await authorize(ciKey)).toBe(401);
      // The account record itself is gone from Redis (default key prefix), its email index too.
      const client = new Redis(redis.url);
      try {
        expect(await client.exists(`nsfwd:acct:${accountId}`, 'nsfwd:email:ops@acme.example')).toBe(0);
        expect(await client.zscore('nsfwd:accts', accountId as string)).toBeNull();
      } finally {
        client.disconnect();
      }
    }, 90_000);

    interface Deployment {
      metadata: {
        generation: number;
        managedFields?: Array<{ manager: string; operation: string; fieldsV1: unknown }>;
      };
      spec: { replicas: number; template: { metadata: { annotations?: Record<string, string> } } };
    }
    const deployment = async () =>
      JSON.parse(
        await kubectl(['get', 'deployment', DETECT, '--show-managed-fields', '-o', 'json']),
      ) as Deployment;
    const modelAnnotation = async () =>
      (await deployment()).spec.template.metadata.annotations?.['nsfwdetector.io/model'];
    /**
     * No kubelet or deployment controller runs here: the test writes the Deployment's status through
     * the status subresource as the deployment controller would, for the current generation.
     */
    const setRolloutStatus = async (s: { replicas: number; updated: number; unavailable?: number }) => {
      const { metadata } = await deployment();
      const available = s.replicas - (s.unavailable ?? 0);
      const status = {
        observedGeneration: metadata.generation,
        replicas: s.replicas,
        updatedReplicas: s.updated,
        readyReplicas: available,
        availableReplicas: available,
        unavailableReplicas: s.unavailable ?? 0,
      };
      await kubectl([
        'patch',
        'deployment',
        DETECT,
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status }),
      ]);
    };
    const patchPolicy = async (spec: object) => {
      await kubectl(['patch', 'detectionpolicy', 'main', '--type=merge', '-p', JSON.stringify({ spec })]);
      return (await getJson<Cr>('detectionpolicy', 'main')).metadata.generation;
    };

    it('rolls detect when the model changes (pod-template annotation), Ready once the Deployment has rolled out', async () => {
      // The Deployment as the chart renders it, and the chart points the operator at that name.
      const chart = (template: string) =>
        helm([
          'template',
          'nsfwdetector',
          CHART_DIR,
          '--set',
          'operator.enabled=true',
          '--show-only',
          template,
        ]);
      const operatorYaml = await chart('templates/operator.yaml');
      expect(operatorYaml.stdout).toContain(`{ name: OPERATOR_DETECT_DEPLOYMENT, value: "${DETECT}" }`);
      const detectYaml = await chart('templates/detect-deployment.yaml');
      expect(detectYaml.code, detectYaml.stderr).toBe(0);
      expect(detectYaml.stdout).toContain(`name: ${DETECT}\n`);
      await kubectl(['apply', '--server-side', '--field-manager=helm', '-f', '-'], detectYaml.stdout);
      await setRolloutStatus({ replicas: 1, updated: 1 });
      // The policy names no model, and the template's MODEL is what its pods run: nothing to roll.
      const start = (await getJson<Cr>('detectionpolicy', 'main')).metadata.generation;
      await eventually('the policy to follow the rolled-out Deployment', async () => {
        const c = await condition('Ready', start);
        return c.status === 'True' && c.reason === 'RolledOut' ? c : undefined;
      });
      expect(await modelAnnotation()).toBeUndefined();
      expect((await deployment()).metadata.generation).toBe(1);

      // The model changes: the operator sets the annotation (a new pod template) and reports the rollout.
      const generation = await patchPolicy({ model: 'inception_v3' });
      const progressing = await eventually('Progressing=True', async () => {
        const c = await condition('Progressing', generation);
        return c.status === 'True' ? c : undefined;
      });
      expect(progressing.reason).toBe('RollingOut');
      expect(progressing.message).toContain(`Deployment ${DETECT} is rolling out model inception_v3`);
      expect((await condition('Ready', generation)).status).toBe('False');
      const rolled = await deployment();
      expect(rolled.spec.template.metadata.annotations?.['nsfwdetector.io/model']).toBe('inception_v3');
      expect(rolled.metadata.generation).toBe(2);
      // Server-side apply under the operator's field manager, owning that one annotation and nothing else.
      expect(rolled.metadata.managedFields?.filter((f) => f.manager === 'nsfwdetector-operator')).toEqual([
        expect.objectContaining({
          operation: 'Apply',
          fieldsV1: {
            'f:spec': {
              'f:template': { 'f:metadata': { 'f:annotations': { 'f:nsfwdetector.io/model': {} } } },
            },
          },
        }),
      ]);
      expect(JSON.parse(await configMapText()).model).toBe('inception_v3');
      expect(
        await kubectl(['get', 'events', '--field-selector', 'involvedObject.name=main,reason=RollingOut']),
      ).toContain('inception_v3');

      // Midway (as the controller reports a surge: one new pod up, the old one still there): not Ready.
      await setRolloutStatus({ replicas: 2, updated: 1, unavailable: 1 });
      await eventually('the status to follow the rollout midway', async () => {
        const c = await condition('Progressing', generation);
        return c.message.includes('1 of 2 replica(s) updated') ? c : undefined;
      });
      expect((await condition('Ready', generation)).status).toBe('False');
      // Done: Ready for this generation; `kubectl wait` sees it.
      await setRolloutStatus({ replicas: 1, updated: 1 });
      await kubectl(['wait', '--for=condition=Ready', 'detectionpolicy/main', '--timeout=60s']);
      await readyFor('main', generation);
      const done = await condition('Progressing', generation);
      expect(done).toMatchObject({ status: 'False', reason: 'RolledOut' });
      expect(done.message).toContain(`Deployment ${DETECT} runs model inception_v3`);

      // A threshold-only change is in force without new pods: the Deployment is left alone.
      const thresholdsOnly = await patchPolicy({ thresholds: { allow: 0.2, block: 0.7 } });
      await readyFor('main', thresholdsOnly);
      expect(JSON.parse(await configMapText()).thresholds).toEqual({ allow: 0.2, block: 0.7 });
      const after = await deployment();
      expect(after.metadata.generation).toBe(2);
      expect(after.spec.template.metadata.annotations?.['nsfwdetector.io/model']).toBe('inception_v3');
    }, 180_000);

    it('a detect pod booting with the mounted policy file loads the model the policy names', async () => {
      // A new pod of the rollout above: the kubelet mounts the ConfigMap (inception_v3) before detect starts.
      mount = mkdtempSync(join(tmpdir(), 'nsfwdetector-policy-'));
      dirs.push(mount);
      kubeletWrite(await configMapText());
      symlinkSync('..data/policy.json', join(mount, 'policy.json'));
      const pod = await spawnService({
        entry: 'services/detect/server.ts',
        portVar: 'DETECT_PORT',
        env: { POLICY_FILE: join(mount, 'policy.json'), MODEL: 'mobilenet_v2', SCORING_WORKERS: '1' },
      });
      operators.push(pod);
      const ready = await eventually(
        'detect to load its model',
        async () => {
          const res = await fetch(`${pod.url}/internal/ready`);
          return res.status === 200 ? ((await res.json()) as { data: { model: string } }).data : undefined;
        },
        120_000,
      );
      expect(ready.model).toBe('inception_v3');
      await pod.stop();
    }, 180_000);

    /**
     * After an API server restart: a policy change (thresholds and model; the Deployment's status set
     * as its controller would, rolled out) and a new ApiAccount, reconciled by the process `leader`
     * that was running before, which still holds the Lease.
     */
    const convergesAfterRestart = async (
      leader: ServerProcess,
      name: string,
      model: string,
      allow: number,
    ) => {
      const generation = await patchPolicy({ model, thresholds: { allow, block: 0.85 } });
      await eventually('the annotation to follow', async () =>
        (await modelAnnotation()) === model ? true : undefined,
      );
      expect((await condition('Progressing', generation)).status).toBe('True');
      await setRolloutStatus({ replicas: 1, updated: 1 });
      await readyFor('main', generation);
      expect(JSON.parse(await configMapText())).toMatchObject({ model, thresholds: { allow, block: 0.85 } });
      await kubectl(
        ['apply', '-f', '-'],
        `apiVersion: nsfwdetector.io/v1alpha1
kind: ApiAccount
metadata: { name: ${name}, namespace: default }
spec: { email: ${name}@acme.example, tier: free, keys: [{ name: ops }] }
`,
      );
      await kubectl(['wait', '--for=condition=Ready', `apiaccount/${name}`, '--timeout=60s']);
      const secret = await getJson<{ data: Record<string, string> }>('secret', `${name}-keys`);
      expect(await authorize(Buffer.from(secret.data.ops as string, 'base64').toString())).toBe(200);
      expect(leader.proc.exitCode).toBeNull();
      expect(await leaseHolder()).toBe(leader.output().match(/"identity":"([^"]+)"/)?.[1]);
    };
    const leaderProcess = async () => {
      const holder = await leaseHolder();
      const leader = operators.find(
        (p) => p.proc.exitCode === null && p.output().includes(`"identity":"${holder}"`),
      );
      if (!leader) throw new Error(`no running operator holds the Lease (${holder})`);
      return leader;
    };
    const count = (text: string, what: string) => text.split(what).length - 1;

    it('survives an API server restart longer than its renew deadline: the leader steps down, re-takes its Lease, reconciles', async () => {
      const leader = await leaderProcess();
      // Away 6 s: past the renew deadline of its 4 s Lease (2.7 s).
      await kube.restart({ downMs: 6_000 });
      await convergesAfterRestart(leader, 'restarted-a', 'mobilenet_v2', 0.1);
      expect(leader.output()).toContain('lost leadership');
      expect(count(leader.output(), '"msg":"became leader"')).toBeGreaterThanOrEqual(2);
    }, 240_000);

    it('recovers from an API server restart mid-watch: the leader keeps its Lease, its informers resume', async () => {
      // A leader whose Lease outlasts the restart (the one above steps down gracefully, releasing it).
      await (await leaderProcess()).stop();
      const leader = await startOperator('operator-d', { OPERATOR_LEASE_SECONDS: '120' });
      await eventually('operator-d to lead', async () =>
        (await leaseHolder()) === 'operator-d' ? true : undefined,
      );
      await eventually('operator-d to have listed everything', async () =>
        leader.logLines().some((l) => l.msg === 'reconciled' && l.kind === 'DetectionPolicy')
          ? true
          : undefined,
      );
      // etcd keeps running; the watches end and requests are refused until the API server is back.
      await kube.restart();
      await convergesAfterRestart(leader, 'restarted-b', 'inception_v3', 0.15);
      const out = leader.output();
      expect(out).not.toContain('lost leadership');
      expect(count(out, '"msg":"became leader"')).toBe(1);
      const restarted = leader.logLines().filter((l) => l.msg === 'watch failed; restarting');
      for (const kind of ['DetectionPolicy', 'ApiAccount', 'Deployment'])
        expect(restarted.map((l) => l.kind)).toContain(kind);
    }, 240_000);
  },
  [REDIS_SERVER],
);
