// `skaffold dev` on the local node (npm run kube:up), driven like a developer: in a copy of the working
// tree (the test edits the copy, never the tracked files), profiles dev + local-node: the image built by
// the node's private dockerd and pushed to its registry, the chart deployed with the status check on,
// the gateway port-forwarded. A 200 from the forwarded gateway, then an edit that changes an answer
// (detect's allow threshold, a chart value: helm upgrade and a detect rollout, no rebuild), then the new
// answer; then skaffold stopped, and what it deployed gone. Figures print with a `kube-node:` prefix.

import { execFile, execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Child, spawnChild } from '../support/children.ts';
import { eventually } from '../support/eventually.ts';
import { describeWithKubeNode, type KubeNodeFacts, pushImages } from '../support/kube-node.ts';
import { REPO } from '../support/paths.ts';
import { get, post } from '../support/stack-client.ts';
import { STACK_TOOLS } from '../support/stack-tools.ts';
import { KUBE_TOOLS } from '../support/tools.ts';

const execFileAsync = promisify(execFile);

const SKAFFOLD = KUBE_TOOLS.skaffold;

const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** skaffold dev's suite, on the node test/kube/node.test.ts brings up (`nodeFacts` once it is up). */
export function skaffoldDevOnTheNode(nodeFacts: () => KubeNodeFacts): void {
  describeWithKubeNode('skaffold dev on the local node', () => {
    let facts: KubeNodeFacts;
    let copy: string;
    let dockerHost: string;
    let skaffold: Child | undefined;
    let gateway: string;

    const kubectl = async (...args: string[]) =>
      (await execFileAsync(facts.kubectl, ['--kubeconfig', facts.kubeconfig, ...args], { encoding: 'utf8' }))
        .stdout;
    const thresholds = async () => {
      const a = await post(gateway, '/api/public/detect');
      return a.status === 200 ? JSON.stringify(a.body.data.thresholds) : `${a.status}`;
    };

    beforeAll(async () => {
      facts = nodeFacts();
      // Envoy and Redis as users get them (kube:image pushes them); our image is skaffold's to build.
      await pushImages(facts);
      copy = mkdtempSync(join(tmpdir(), 'nsfwdetector-skaffold-'));
      const files = execFileSync('git', ['-C', REPO, 'ls-files', '-co', '--exclude-standard', '-z'], {
        encoding: 'utf8',
      })
        .split('\0')
        .filter((f) => f && !f.startsWith('node_modules/'));
      for (const f of files) {
        mkdirSync(join(copy, dirname(f)), { recursive: true });
        try {
          copyFileSync(join(REPO, f), join(copy, f));
        } catch {
          // deleted in the working tree, not yet in git
        }
      }
      copyFileSync(
        join(facts.stateDir, 'image-values.yaml'),
        join(copy, 'tools/kube-node/image-values.yaml'),
      );
      // Anonymous limits far above what the test sends (the copy's values, as a developer would).
      const values = join(copy, 'charts/nsfwdetector/values.yaml');
      writeFileSync(
        values,
        readFileSync(values, 'utf8')
          .replace(/^ {2}anonPerMinute: \d+$/m, '  anonPerMinute: 100000')
          .replace(/^ {2}anonPerDay: \d+$/m, '  anonPerDay: 10000000'),
      );
      dockerHost = execFileSync('bash', [join(REPO, 'tools/kube-node/dockerd.sh'), 'start'], {
        encoding: 'utf8',
      }).trim();
      const base = execFileSync('bash', [join(REPO, '.ci/docker-base.sh')], {
        encoding: 'utf8',
        cwd: REPO,
        env: { ...process.env, DOCKER_HOST: dockerHost },
      }).trim();
      const started = Date.now();
      skaffold = spawnChild(
        'skaffold dev',
        SKAFFOLD.find() as string,
        [
          'dev',
          '--profile=dev,local-node',
          `--default-repo=${facts.registry}`,
          `--insecure-registry=${facts.registry}`,
          `--kubeconfig=${facts.kubeconfig}`,
          '--status-check=true',
          '--port-forward=user',
          '--tail=false',
          '--cleanup=true',
          '--interactive=false',
          '--update-check=false',
        ],
        {
          cwd: copy,
          env: {
            ...process.env,
            // skaffold runs helm and kubectl from the PATH: the pinned ones first.
            PATH: `${dirname(STACK_TOOLS.helm.find() as string)}:${dirname(facts.kubectl)}:${process.env.PATH}`,
            DOCKER_HOST: dockerHost,
            NODE_BASE: base,
            SKAFFOLD_DETECT_MINIKUBE: 'false',
          },
        },
      );
      const forwarded = await eventually(
        'skaffold to port-forward the gateway',
        async () => {
          if (!skaffold?.running()) throw new Error(`skaffold exited:\n${skaffold?.output().slice(-4000)}`);
          const m = skaffold
            .output()
            .match(/Port forwarding service\/nsfwdetector-gateway .*-> http:\/\/([\d.]+:\d+)/);
          return m?.[1];
        },
        1_200_000,
      );
      gateway = `http://${forwarded}`;
      await eventually('a 200 from the forwarded gateway', async () =>
        (await get(gateway, '/api/public/health')).status === 200 ? true : undefined,
      );
      // Health answers before detect is ready (its model loaded, its workers warm): until then a detect
      // is 503/5001, as documented. The checks below start from a scoring detect.
      await eventually('a scored image through the forwarded gateway', async () =>
        (await thresholds()) !== '503' ? true : undefined,
      );
      console.log(
        `kube-node: skaffold dev: first build, deploy (status check on) and 200 in ${seconds(Date.now() - started)} s`,
      );
    }, 1_800_000);

    afterAll(async () => {
      if (skaffold?.running()) await skaffold.stop(120_000);
      if (dockerHost) execFileSync('bash', [join(REPO, 'tools/kube-node/dockerd.sh'), 'stop']);
      if (copy) rmSync(copy, { recursive: true, force: true });
    }, 600_000);

    it('an edit to the copy reaches the next answer through the forwarded gateway', async () => {
      expect(await thresholds()).toBe(JSON.stringify({ allow: 0.1, block: 0.9 }));
      const values = join(copy, 'charts/nsfwdetector/values.yaml');
      const edited = Date.now();
      writeFileSync(
        values,
        readFileSync(values, 'utf8').replace(/^ {2}thresholdAllow: 0\.1$/m, '  thresholdAllow: 0.15'),
      );
      await eventually(
        'the new allow threshold through the forwarded gateway',
        async () => ((await thresholds()) === JSON.stringify({ allow: 0.15, block: 0.9 }) ? true : undefined),
        600_000,
      );
      console.log(
        `kube-node: skaffold dev: chart value edit -> new answer through the forwarded gateway in ${seconds(Date.now() - edited)} s`,
      );
    }, 900_000);

    it('stopping skaffold dev removes what it deployed (release and pods)', async () => {
      const proc = skaffold as Child;
      proc.proc.kill('SIGINT');
      const code = await Promise.race([
        proc.exited,
        new Promise<string>((r) => setTimeout(() => r('still running after 180 s'), 180_000)),
      ]);
      expect(code, proc.output().slice(-3000)).not.toBe('still running after 180 s');
      expect(proc.output()).toMatch(/Cleaning up/);
      await eventually(
        'the release and its pods to be gone',
        async () => {
          const pods = JSON.parse(
            await kubectl('get', 'pods', '-A', '-l', 'app.kubernetes.io/instance=nsfwdetector', '-o', 'json'),
          );
          const secrets = await kubectl('get', 'secrets', '-A', '-l', 'owner=helm', '-o', 'name');
          return pods.items.length === 0 && secrets.trim() === '' ? true : undefined;
        },
        180_000,
      );
    }, 400_000);
  }, [STACK_TOOLS.helm, SKAFFOLD]);
}
