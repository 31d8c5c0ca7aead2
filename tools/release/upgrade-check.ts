// The release check's upgrade (tools/release/upgrade-check.sh runs it on the local node, its images'
// signatures verified first): the previous release installed from its OCI chart with the operator on; an
// account and key made with the admin CLI, an ApiAccount with a key and the DetectionPolicy `main`; then
// a value the new chart does not know refused by `helm upgrade` (values.schema.json) with nothing
// changed, and `helm upgrade --wait` to the new release's OCI chart under steady k6 traffic (the CLI key,
// the ApiAccount's key, anonymous): every answer 200, or 429 for the anonymous clients past the policy's
// minute limit; afterwards the keys made before answer 200 and the policy's thresholds are unchanged.
// Prints `release-check:` lines; any failure exits 1.
//
// node --import tsx tools/release/upgrade-check.ts REGISTRY PREVIOUS VERSION VALUES_FILE...
// (env: KUBECONFIG, KUBECTL, HELM)

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import {
  adminCliArgs,
  EVENTS_ARGS,
  gatewayLogsArgs,
  reportingWait,
} from '../../test/support/chart-kubectl.ts';
import { post } from '../../test/support/stack-client.ts';
import { type Counts, startLoad } from '../../test/support/steady-load.ts';

const execFileAsync = promisify(execFile);
const [registry, previous, version, ...valuesFiles] = process.argv.slice(2);
const KUBECTL = process.env.KUBECTL as string;
const HELM = process.env.HELM as string;
if (!registry || !previous || !version || !KUBECTL || !HELM)
  throw new Error('usage: upgrade-check.ts REGISTRY PREVIOUS VERSION VALUES_FILE... (env KUBECTL, HELM)');
const RELEASE = 'nsfwdetector';
const NS = 'nsfwdetector';
const CHART = `oci://${registry}/charts/nsfwdetector`;
const THRESHOLDS = { allow: 0.25, block: 0.75 };
// The anonymous clients' minute limit, under their rate (ANONYMOUS_RATE a second): some of their answers
// are 429, as the policy says, through the whole upgrade.
const ANONYMOUS_PER_MINUTE = 100;
const ANONYMOUS_RATE = 2;
const KEY_RATE = 2;

const say = (line: string) => console.log(`release-check: ${line}`);
class CheckFailed extends Error {}
const fail = (why: string): never => {
  throw new CheckFailed(why);
};

async function run(command: string, args: string[], input?: string): Promise<string> {
  const child = execFileAsync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (input !== undefined) child.child.stdin?.end(input);
  return (await child).stdout;
}
const kubectl = (args: string[], input?: string) => run(KUBECTL, ['-n', NS, ...args], input);
// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects, read field by field
const kubectlJson = async (args: string[]): Promise<any> =>
  JSON.parse(await kubectl([...args, '-o', 'json']));
const helm = (args: string[]) => run(HELM, args);
const valuesArgs = valuesFiles.flatMap((f) => ['-f', f]);
const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** The admin CLI in a gateway pod's quota container (it has the Redis the chart runs). */
const admin = async (...args: string[]) => JSON.parse(await kubectl(adminCliArgs(RELEASE, args)));

const policy = `apiVersion: nsfwdetector.io/v1alpha1
kind: DetectionPolicy
metadata: { name: main, namespace: ${NS} }
spec:
  thresholds: { allow: ${THRESHOLDS.allow}, block: ${THRESHOLDS.block} }
  model: mobilenet_v2
  anonymous: { perMinute: ${ANONYMOUS_PER_MINUTE}, perDay: 10000000 }
  tiers: { pro: { perMinute: 100000, perDay: 10000000 } }
`;
const account = `apiVersion: nsfwdetector.io/v1alpha1
kind: ApiAccount
metadata: { name: acme, namespace: ${NS} }
spec:
  email: ops@acme.example
  tier: pro
  keys: [{ name: ci }]
`;

/** A detect with `key` (anonymous without): its status, code and the thresholds it was decided with. */
async function detect(gateway: string, key?: string) {
  const a = await post(gateway, key ? '/api/open/detect' : '/api/public/detect', {
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });
  return { status: a.status, code: a.code, thresholds: JSON.stringify(a.body?.data?.thresholds) };
}

/** Each caller's detect answers 200 with the policy's `thresholds`; otherwise the check fails. */
async function expectPolicyAnswers(
  gateway: string,
  thresholds: string,
  release: string,
  when: string,
  callers: ReadonlyArray<readonly [string, string | undefined]>,
): Promise<void> {
  for (const [who, key] of callers) {
    const a = await detect(gateway, key);
    if (a.status !== 200 || a.thresholds !== thresholds)
      fail(`${release}: ${who} answered ${JSON.stringify(a)} ${when}, not 200 with ${thresholds}`);
  }
}

/** The answers other than those allowed: `allowed` outcomes pass. */
function failedAnswers(counts: Counts, allowed: string[]): string[] {
  return Object.entries(counts)
    .filter(([o, n]) => n > 0 && !allowed.includes(o))
    .map(([o, n]) => `${n} × ${o}`);
}

async function imagesRunning(): Promise<string[]> {
  const images = new Set<string>();
  for (const kind of ['deployments', 'statefulsets'])
    for (const w of (await kubectlJson(['get', kind])).items)
      for (const c of w.spec.template.spec.containers) images.add(c.image);
  return [...images].sort();
}

/** Each pod's name and uid: a pod replaced under the same name (a StatefulSet's) has a new uid. */
async function podUids(): Promise<Map<string, string>> {
  const pods = (await kubectlJson(['get', 'pods'])).items as { metadata: { name: string; uid: string } }[];
  return new Map(pods.map((p) => [p.metadata.name, p.metadata.uid]));
}

/**
 * Beside the failed answers' times (k6 printed them): which pods the rollout stopped and started when,
 * and the quota sidecars' warnings (a store fault behind a 503 names itself there).
 */
async function explain(): Promise<void> {
  const events = await kubectl(EVENTS_ARGS);
  console.log(
    events
      .split('\n')
      .filter((l) => /^AT|\s(Killing|SuccessfulDelete|SuccessfulCreate|Started)\s/.test(l))
      .join('\n'),
  );
  const quota = await kubectl(gatewayLogsArgs('quota'));
  console.log(
    `quota sidecars' warnings and 503s:\n${quota
      .split('\n')
      .filter((l) => /"level":(40|50)|READONLY|5001|"statusCode":503/.test(l))
      .join('\n')}`,
  );
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'nsfwdetector-upgrade-check-'));
  try {
    let started = performance.now();
    await helm([
      'install',
      RELEASE,
      CHART,
      '--version',
      previous as string,
      '--plain-http',
      '--namespace',
      NS,
      '--create-namespace',
      ...valuesArgs,
      '--wait',
      '--timeout',
      '15m',
    ]);
    say(`helm install ${CHART} --version ${previous} --wait: ${seconds(performance.now() - started)} s`);
    const svc = await kubectlJson(['get', 'service', `${RELEASE}-gateway`]);
    const gateway = `http://${svc.spec.clusterIP}:${svc.spec.ports[0].port}`;

    await kubectl(['apply', '-f', '-'], policy);
    await kubectl(['wait', '--for=condition=Ready', 'detectionpolicy/main', '--timeout=300s']);
    await kubectl(['apply', '-f', '-'], account);
    await kubectl(['wait', '--for=condition=Ready', 'apiaccount/acme', '--timeout=120s']);
    const secret = await kubectlJson(['get', 'secret', 'acme-keys']);
    const acmeKey = Buffer.from(secret.data.ci, 'base64').toString();
    await admin('create-account', '--email', 'load@example.com', '--tier', 'pro');
    const cliKey = (await admin('issue-key', 'load@example.com', '--name', 'load')).secret as string;
    const thresholds = JSON.stringify(THRESHOLDS);
    await expectPolicyAnswers(gateway, thresholds, `${previous}`, 'before the upgrade', [
      ['the CLI key', cliKey],
      ["the ApiAccount's key", acmeKey],
      ['anonymous', undefined],
    ]);
    say(
      `${previous}: an account and key (admin CLI), an ApiAccount with a key and the DetectionPolicy main (thresholds ${thresholds}, anonymous ${ANONYMOUS_PER_MINUTE} a minute) made; each answers 200 with those thresholds`,
    );

    const upgradeTo = [
      'upgrade',
      RELEASE,
      CHART,
      '--version',
      version as string,
      '--plain-http',
      '--namespace',
      NS,
      ...valuesArgs,
    ];
    // A value renamed or removed: refused by the new chart's schema before anything changes.
    const renamed = join(work, 'renamed-value.yaml');
    writeFileSync(renamed, 'detect:\n  replica: 2\n');
    const refused = await execFileAsync(HELM, [...upgradeTo, '-f', renamed]).then(
      () => fail(`helm upgrade to ${version} with detect.replica (no such value) succeeded`),
      (e: { stderr: string }) => e.stderr,
    );
    const message = /at '\/detect': additional properties 'replica' not allowed/.exec(refused);
    if (!message) fail(`helm upgrade with detect.replica failed without naming it: ${refused}`);
    const revision = (
      JSON.parse(await helm(['status', RELEASE, '--namespace', NS, '-o', 'json'])) as {
        version: number;
      }
    ).version;
    if (revision !== 1) fail(`the refused upgrade made revision ${revision}`);
    say(
      `helm upgrade to ${version} with a value it does not have (detect.replica): refused, "${message?.[0]}"; the release still revision 1`,
    );

    const before = await imagesRunning();
    const podsBefore = await podUids();
    const loads = {
      'the CLI key': startLoad(gateway, KEY_RATE, cliKey),
      "the ApiAccount's key": startLoad(gateway, KEY_RATE, acmeKey),
      anonymous: startLoad(gateway, ANONYMOUS_RATE),
    };
    await sleep(10_000);
    started = performance.now();
    // Tens of seconds on a healthy node: minutes mean it is not, and the report says why.
    await reportingWait(helm([...upgradeTo, '--wait', '--timeout', '5m']), (args) => run(KUBECTL, args), NS);
    const upgradeMs = performance.now() - started;
    await sleep(10_000);
    const problems: string[] = [];
    const figures: string[] = [];
    for (const [who, load] of Object.entries(loads)) {
      const { counts, unanswered } = await load.stop();
      const answered = Object.entries(counts)
        .filter(([, n]) => n > 0)
        .map(([o, n]) => `${o}: ${n}`)
        .join(', ');
      figures.push(`${who} ${answered}${unanswered ? ` (${unanswered} cut by stopping k6)` : ''}`);
      const bad = failedAnswers(counts, who === 'anonymous' ? ['200', '429'] : ['200']);
      if (bad.length) problems.push(`${who}: ${bad.join(', ')}`);
    }
    const after = await imagesRunning();
    const podsAfter = await podUids();
    const replaced = [...podsBefore]
      .filter(([name, uid]) => podsAfter.get(name) !== uid)
      .map(([name]) => name);
    say(
      `helm upgrade ${previous} -> ${version} (${CHART}) --wait under load: ${seconds(upgradeMs)} s; images ${before.length} -> ${after.length} changed: ${after.filter((i) => !before.includes(i)).length}; pods replaced ${replaced.length} of ${podsBefore.size} (${replaced.filter((n) => n.includes('-redis-')).join(', ') || 'no Redis pod'} among them)`,
    );
    say(
      `answers from 10 s before the upgrade to 10 s after it (k6, ${KEY_RATE}/s per key, ${ANONYMOUS_RATE}/s anonymous): ${figures.join('; ')}`,
    );
    if (problems.length) await explain();
    const [listed] = JSON.parse(await helm(['list', '--namespace', NS, '-o', 'json'])) as {
      chart: string;
      revision: string;
    }[];
    if (listed?.chart !== `nsfwdetector-${version}`)
      fail(`the release is chart ${listed?.chart}, not nsfwdetector-${version}`);

    await expectPolicyAnswers(gateway, thresholds, `${version}`, 'after the upgrade', [
      ['the CLI key made before the upgrade', cliKey],
      ["the ApiAccount's key made before it", acmeKey],
    ]);
    // Anonymous: 200 with the thresholds, or 429 when the anonymous load has just taken the policy's
    // minute (which is then in force too).
    const anonymous = await detect(gateway);
    if (
      !(anonymous.status === 200 && anonymous.thresholds === thresholds) &&
      !(anonymous.status === 429 && anonymous.code === 4290)
    )
      fail(`${version}: anonymous answered ${JSON.stringify(anonymous)} after the upgrade`);
    const kept = await kubectlJson(['get', 'detectionpolicy', 'main']);
    if (JSON.stringify(kept.spec.thresholds) !== thresholds)
      fail(`the policy's thresholds are ${JSON.stringify(kept.spec.thresholds)} after the upgrade`);
    const usage = await admin('usage', 'load@example.com');
    say(
      `${version}: the CLI key and the ApiAccount's key made before the upgrade answer 200 with the policy's thresholds ${thresholds} (the DetectionPolicy's spec unchanged), anonymous ${anonymous.status}; the account's usage today ${usage.usage.day.used}`,
    );
    if (problems.length)
      fail(`answers other than 200 (and 429 for anonymous) during the upgrade: ${problems.join('; ')}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(
    `release-check: FAILED: ${e instanceof CheckFailed ? e.message : e instanceof Error ? e.stack : e}`,
  );
  process.exit(1);
});
