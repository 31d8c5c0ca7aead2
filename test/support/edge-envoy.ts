// The chart's Envoy configuration (rendered with values-local.yaml, as `npm run stack` does) run by the
// real Envoy on loopback in front of the given quota service and detect endpoints: several detect
// endpoints stand for several detect pods (the chart's headless Service resolves to one per pod).

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { envoyAdminUrl, envoyListenerPort, localEnvoyArgs } from '../../tools/stack/local-envoy.ts';
import { LOCAL_FILTER_VALUES, LOCAL_VALUES, renderEnvoyConfig } from '../../tools/stack/render-envoy.ts';
import { type Child, spawnChild } from './children.ts';
import { ENVOY, requireTool } from './tools.ts';

export interface EdgeEnvoy {
  url: string;
  adminUrl: string;
  pid: number;
  child: Child;
  /** A counter or gauge of Envoy's /stats (0 when absent). */
  stat: (name: string) => Promise<number>;
  stop: () => Promise<void>;
}

export interface EdgeEnvoyOptions {
  quotaPort: number;
  detectPorts: number[];
  edgeSecret: string;
  /** More chart values (helm --set). */
  set?: Record<string, string | number>;
}

async function until<T>(what: string, child: Child, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const found = await probe().catch(() => undefined);
    if (found !== undefined) return found;
    if (!child.running()) throw new Error(`Envoy exited before ${what}:\n${child.output().slice(-4000)}`);
    if (Date.now() > deadline) throw new Error(`no ${what} within 30 s:\n${child.output().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function startEdgeEnvoy(opts: EdgeEnvoyOptions): Promise<EdgeEnvoy> {
  const config = (await renderEnvoyConfig({
    valuesFiles: [LOCAL_VALUES],
    set: {
      'envoy.listener.port': 0,
      ...LOCAL_FILTER_VALUES,
      'envoy.upstreams.detect.port': opts.detectPorts[0] as number,
      'envoy.upstreams.health.port': opts.detectPorts[0] as number,
      'envoy.upstreams.quota.port': opts.quotaPort,
      'envoy.tracing.samplingPercent': 0,
      ...opts.set,
    },
    // biome-ignore lint/suspicious/noExplicitAny: patching Envoy's JSON configuration
  })) as any;
  const detect = config.static_resources.clusters.find((c: { name: string }) => c.name === 'detect');
  detect.load_assignment.endpoints[0].lb_endpoints = opts.detectPorts.map((port) => ({
    endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: port } } },
  }));
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-edge-envoy-'));
  const configPath = join(dir, 'envoy.json');
  const adminPath = join(dir, 'admin-address');
  writeFileSync(configPath, JSON.stringify(config));
  const child = spawnChild(
    'envoy',
    requireTool(ENVOY),
    localEnvoyArgs(configPath, adminPath, { concurrency: 1, logLevel: 'warn' }),
    { env: { ...process.env, EDGE_SECRET: opts.edgeSecret } },
  );
  const stop = async () => {
    await child.stop(5_000);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const adminUrl = await until('admin address', child, async () => envoyAdminUrl(adminPath));
    const port = await until('edge listener', child, () => envoyListenerPort(adminUrl, 'edge'));
    const stat = async (name: string) => {
      const res = await fetch(`${adminUrl}/stats?filter=${encodeURIComponent(`^${name}$`)}`);
      const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name}: `));
      return line ? Number(line.slice(name.length + 2)) : 0;
    };
    // Every detect endpoint has passed its first health check.
    await until('healthy detect endpoints', child, async () =>
      (await stat('cluster.detect.membership_healthy')) === opts.detectPorts.length ? true : undefined,
    );
    return { url: `http://127.0.0.1:${port}`, adminUrl, pid: child.pid, child, stat, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
