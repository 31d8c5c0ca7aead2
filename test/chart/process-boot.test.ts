// The chart's side of how every process boots and stops (docs/boot.md): it refuses at render the drain
// the processes would refuse at boot (config.shutdownDelayMs not below config.shutdownGraceMs: every
// pod would exit 2), and it probes the operator on the routes the operator serves, with the timing
// every other Deployment's probes have. Rendering only (`helm template`): the API server's acceptance
// of the objects is test/chart/chart.test.ts's.

import { afterAll, expect, it } from 'vitest';
import { PROBE_PATHS } from '../../lib/common/probes.ts';
import { SETTINGS, type Setting } from '../../lib/common/settings.ts';
import { describeWithTool, HELM } from '../support/tools.ts';
import { CHART_DIR, helm, helmOk, removeHelmHome, sets } from './helm.ts';

const render = (values: Record<string, string | number | boolean>, template: string) =>
  helmOk(['template', 'x', CHART_DIR, ...sets(values), '--show-only', `templates/${template}`]).then(
    (r) => r.stdout,
  );

/**
 * The first container's probes as rendered (startupProbe, readinessProbe, livenessProbe and their
 * fields), dedented: from the `startupProbe:` line to the last line indented under a probe.
 */
function probeBlock(manifest: string): string {
  const lines = manifest.split('\n');
  const start = lines.findIndex((l) => /^\s+startupProbe:$/.test(l));
  if (start < 0) throw new Error(`no startupProbe in:\n${manifest}`);
  const indent = (lines[start] as string).length - (lines[start] as string).trimStart().length;
  const block: string[] = [];
  for (const line of lines.slice(start)) {
    const own = line.length - line.trimStart().length;
    const probe = own === indent && /^\s+(startup|readiness|liveness)Probe:$/.test(line);
    if (!probe && own <= indent) break;
    block.push(line.slice(indent));
  }
  return block.join('\n');
}

describeWithTool([HELM], "the chart and the processes' boot", () => {
  afterAll(() => removeHelmHome());

  it('refuses a drain (config.shutdownDelayMs) not shorter than the grace, naming both values', async () => {
    const refusals: Array<[number, number]> = [
      [25_000, 25_000],
      [60_000, 1_000],
    ];
    for (const [delay, grace] of refusals) {
      const refused = await helm([
        'template',
        'x',
        CHART_DIR,
        ...sets({ 'config.shutdownDelayMs': delay, 'config.shutdownGraceMs': grace }),
      ]);
      expect(refused.code, refused.stdout).not.toBe(0);
      expect(refused.stderr).toContain(
        `config.shutdownDelayMs must be less than config.shutdownGraceMs (the drain is part of the grace period), got ${delay} and ${grace}`,
      );
    }
    const below = await render(
      { 'config.shutdownDelayMs': 24_999, 'config.shutdownGraceMs': 25_000 },
      'health-deployment.yaml',
    );
    expect(below).toContain('{ name: SHUTDOWN_DELAY_MS, value: "24999" }');
    expect(below).toContain('{ name: SHUTDOWN_GRACE_MS, value: "25000" }');
  });

  it("probes the operator on its metrics port, on the routes it serves, as the services' probes", async () => {
    const operator = await render({ 'operator.enabled': true }, 'operator.yaml');
    const deployment = operator.split(/^---$/m).find((doc) => /^kind: Deployment$/m.test(doc)) ?? '';
    const probes = probeBlock(deployment);
    expect(probes).toContain(`httpGet: { path: ${PROBE_PATHS.live}, port: metrics }`);
    expect(probes).toContain(`httpGet: { path: ${PROBE_PATHS.ready}, port: metrics }`);
    // The port named `metrics` is the one the process listens on (OPERATOR_METRICS_PORT).
    const containerPort = /\{ name: metrics, containerPort: (\d+) \}/.exec(deployment)?.[1];
    const listens = /\{ name: OPERATOR_METRICS_PORT, value: "(\d+)" \}/.exec(deployment)?.[1];
    expect(containerPort).toBeDefined();
    expect(listens).toBe(containerPort);
    // The same timing as the health service's (and every Deployment's: nsfwdetector.httpProbes).
    const health = await render({}, 'health-deployment.yaml');
    const healthPort = /\{ name: HEALTH_PORT, value: "(\d+)" \}/.exec(health)?.[1];
    expect(healthPort).toBeDefined();
    expect(probes).toBe(probeBlock(health).replaceAll(`port: ${healthPort} }`, 'port: metrics }'));
    expect(probes.split('\n').filter((l) => /Probe:$/.test(l))).toEqual([
      'startupProbe:',
      'readinessProbe:',
      'livenessProbe:',
    ]);
  });

  it("gives the operator the chart's settings it reads and the services' termination grace", async () => {
    const values = {
      'operator.enabled': true,
      'config.shutdownGraceMs': 40_000,
      'config.shutdownDelayMs': 7_000,
      'config.logLevel': 'debug',
      'config.redisKeyPrefix': 'other:',
      'config.redisCommandTimeoutMs': 900,
    };
    const operator = await render(values, 'operator.yaml');
    const deployment = operator.split(/^---$/m).find((doc) => /^kind: Deployment$/m.test(doc)) ?? '';
    for (const line of [
      '{ name: SHUTDOWN_GRACE_MS, value: "40000" }',
      '{ name: SHUTDOWN_DELAY_MS, value: "7000" }',
      '{ name: LOG_LEVEL, value: "debug" }',
      '{ name: REDIS_KEY_PREFIX, value: "other:" }',
      '{ name: REDIS_COMMAND_TIMEOUT_MS, value: "900" }',
      '{ name: TRUSTED_PROXY_HOPS, value: "1" }',
    ])
      expect(deployment).toContain(line);
    // Every chart value the table says the operator reads, and none it does not (it scores nothing).
    const env = [...deployment.matchAll(/\{ name: ([A-Z0-9_]+), value:/g)].map((m) => m[1]);
    for (const [name, s] of Object.entries(SETTINGS as Record<string, Setting>)) {
      if (!s.chart || s.chart.env === false) continue;
      if (s.readBy.includes('operator')) expect(env).toContain(name);
      else expect(env).not.toContain(name);
    }
    // 40 s of grace and the 10 s every Deployment adds (nsfwdetector.terminationGrace).
    expect(deployment).toMatch(/^\s+terminationGracePeriodSeconds: 50$/m);
    const detect = await render(values, 'detect-deployment.yaml');
    expect(detect).toMatch(/^\s+terminationGracePeriodSeconds: 50$/m);
    const refused = await helm([
      'template',
      'x',
      CHART_DIR,
      ...sets({ ...values, 'config.shutdownDelayMs': 40_000 }),
      '--show-only',
      'templates/operator.yaml',
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('config.shutdownDelayMs must be less than config.shutdownGraceMs');
  });
});
