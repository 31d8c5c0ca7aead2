// skaffold.yaml checked by skaffold itself (v2.16.1): diagnose, and render of both profiles through the
// chart with a given image tag (no daemon, no registry: --offline, --digest-source=tag). The rendered
// objects are then accepted by the real API server (server-side dry-run).

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ROOT } from '../../tools/stack/stack.ts';
import { requireTool } from '../../tools/stack/tools.ts';
import { describeWithKube } from '../support/describe-kube.ts';
import { type KubeApiServer, requireKubeTool, startKubeApiServer } from '../support/kube-apiserver.ts';

describeWithKube(
  'skaffold.yaml with skaffold v2.16.1',
  ['skaffold', 'kube-apiserver', 'etcd', 'kubectl'],
  () => {
    let kube: KubeApiServer;
    const home = mkdtempSync(join(tmpdir(), 'nsfwdetector-skaffold-'));

    function skaffold(args: string[]): Promise<{ stdout: string; stderr: string }> {
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        HOME: home,
        SKAFFOLD_UPDATE_CHECK: 'false',
        SKAFFOLD_DISABLE_HEALTHCHECK: 'true',
        KUBECONFIG: kube.kubeconfig,
        // skaffold runs helm and kubectl from the PATH: the pinned ones first.
        PATH: `${join(requireTool('helm'), '..')}:${join(requireKubeTool('kubectl'), '..')}:${process.env.PATH}`,
      };
      delete env.NODE_BASE;
      return new Promise((resolve, reject) => {
        execFile(
          requireKubeTool('skaffold'),
          args,
          { cwd: ROOT, env, maxBuffer: 64 * 1024 * 1024 },
          (err, stdout, stderr) => {
            if (err) reject(new Error(`skaffold ${args.join(' ')} failed:\n${stderr}\n${stdout}`));
            else resolve({ stdout, stderr });
          },
        );
      });
    }

    beforeAll(async () => {
      kube = await startKubeApiServer();
    }, 180_000);
    afterAll(async () => {
      await kube?.stop();
      rmSync(home, { recursive: true, force: true });
    });

    it('is a valid v4beta13 config (skaffold diagnose)', async () => {
      const { stdout } = await skaffold(['diagnose', '--yaml-only']);
      expect(stdout).toContain('apiVersion: skaffold/v4beta13');
      expect(stdout).toMatch(/chartPath: \S*charts\/nsfwdetector\n/);
      expect(stdout).toMatch(/resourceName: nsfwdetector-gateway\n\s+port: 80\n[\s\S]*?localPort: 8080/);
    });

    for (const [profile, replicas, logLevel] of [
      ['dev', 1, 'debug'],
      ['prod-like', 2, 'info'],
    ] as const) {
      it(`renders the chart with the given image for the ${profile} profile`, async () => {
        const { stdout } = await skaffold([
          'render',
          '--offline=true',
          '--digest-source=tag',
          `--profile=${profile}`,
          '--images',
          'nsfwdetector=registry.example/nsfwdetector:v9',
        ]);
        // skaffold re-serialises the chart's output: one document per object.
        const docs = stdout.split(/^---$/m);
        const gateway = docs.find(
          (d) => /^kind: Deployment$/m.test(d) && /^ {2}name: nsfwdetector-gateway$/m.test(d),
        );
        expect(gateway).toMatch(new RegExp(`^  replicas: ${replicas}$`, 'm'));
        expect(gateway).toContain('image: registry.example/nsfwdetector:v9');
        expect(gateway).toMatch(new RegExp(`- name: LOG_LEVEL\\n\\s+value: ${logLevel}\\n`));
        if (profile === 'dev') expect(stdout).not.toContain('kind: HorizontalPodAutoscaler');
        else expect(stdout).toContain('kind: HorizontalPodAutoscaler');
        const ns = `skaffold-${profile}`;
        await kube.kubectl(['create', 'namespace', ns]);
        // The helm test hook Pod is admitted only if its ServiceAccount exists (a dry-run creates nothing).
        const sa = stdout.split(/^---$/m).find((doc) => /^kind: ServiceAccount$/m.test(doc)) ?? '';
        await kube.kubectl(['apply', '-n', ns, '-f', '-'], { input: sa });
        const applied = await kube.kubectl(['apply', '--dry-run=server', '-n', ns, '-f', '-'], {
          input: stdout,
        });
        expect(applied.stdout).toContain('deployment.apps/nsfwdetector-detect created (server dry run)');
      });
    }

    it('deploys the dev profile with a given image tag (skaffold deploy, no status check: no kubelet here)', async () => {
      const ns = 'skaffold-deploy';
      await kube.kubectl(['create', 'namespace', ns]);
      await kube.kubectl([
        'label',
        'namespace',
        ns,
        'pod-security.kubernetes.io/enforce=restricted',
        'pod-security.kubernetes.io/warn=restricted',
      ]);
      await skaffold([
        'deploy',
        '--profile=dev',
        '--images',
        'nsfwdetector=registry.example/nsfwdetector:v9',
        '--status-check=false',
        '--namespace',
        ns,
      ]);
      const { stdout } = await kube.kubectl([
        'get',
        'deployment',
        'nsfwdetector-detect',
        '-n',
        ns,
        '-o',
        'json',
      ]);
      const detect = JSON.parse(stdout) as {
        spec: { replicas: number; template: { spec: { containers: { image: string }[] } } };
      };
      expect(detect.spec.template.spec.containers[0]?.image).toBe('registry.example/nsfwdetector:v9');
      expect(detect.spec.replicas).toBe(1);
    });
  },
);
