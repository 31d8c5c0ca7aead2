// The cluster topology on one machine, on loopback: redis-server, Jaeger (trace backend), the quota,
// detect and health servers, and Envoy running the chart's configuration rendered for local values.
// Every child binds port 0 (or, for redis-server, which cannot, a port it then proves it holds) and the
// stack learns the ports from /proc or Envoy's admin API. `npm run stack` (main.ts) and the e2e suite
// (test/e2e) both start it through `startStack`.

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { numberSetting } from '../../lib/common/config.ts';
import { Child, listeningPorts, waitFor } from './child.ts';
import { envoyAdminUrl, envoyListenerPort, localEnvoyArgs } from './local-envoy.ts';
import { LOCAL_FILTER_VALUES, LOCAL_VALUES, renderEnvoyConfigText } from './render-envoy.ts';
import { requireTool } from './tools.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export type ServiceName = 'quota' | 'detect' | 'health';
export type ChildName = ServiceName | 'redis' | 'jaeger' | 'envoy';

/** Each service's thin server, the variable it reads its port from, and how to tell it is ready. */
const SERVICES: Record<ServiceName, { entry: string; portVar: string; readyPath: string }> = {
  quota: { entry: 'services/quota/server.ts', portVar: 'QUOTA_PORT', readyPath: '/internal/ready' },
  detect: { entry: 'services/detect/server.ts', portVar: 'DETECT_PORT', readyPath: '/internal/ready' },
  health: { entry: 'services/health/server.ts', portVar: 'HEALTH_PORT', readyPath: '/api/public/health' },
};

export interface StackOptions {
  /** The edge's port (STACK_PORT); 0 lets the system choose. Default 8080. */
  port?: number;
  /** The product configuration the services get (ANON_PER_MINUTE, MODEL, …). Default: process.env. */
  env?: Record<string, string | undefined>;
  /** Echo every child's output, prefixed with its name (npm run stack). */
  echo?: boolean;
  /** Bound on bringing everything up (the detect model load dominates). */
  timeoutMs?: number;
  /** Extra chart values for Envoy's configuration (helm --set), e.g. { 'envoy.tracing.samplingPercent': 0 }. */
  envoyValues?: Record<string, string | number>;
  /** Envoy's worker threads (--concurrency). Default 1: see ENVOY_WORKERS below. */
  envoyWorkers?: number;
}

export interface Stack {
  /** The only entry: Envoy's listener. */
  edgeUrl: string;
  /** Envoy's admin interface (loopback): /stats/prometheus, /config_dump. */
  adminUrl: string;
  /** Jaeger's UI and query API (/api/traces/<trace id>). */
  jaegerUrl: string;
  redisUrl: string;
  /** Each service's own address (its /metrics, its probes), bypassing the edge. */
  serviceUrls: Record<ServiceName, string>;
  /** The temp directory holding the rendered configuration; removed by stop(). */
  dir: string;
  child(name: ChildName): Child;
  /** Every child's pid. */
  pids(): number[];
  /** Starts a stopped or killed child again on the same port (fault tests). */
  restart(name: ServiceName | 'redis'): Promise<void>;
  /** Stops every child (edge first), then removes the temp directory. */
  stop(): Promise<void>;
}

const JAEGER_CONFIG = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    # No self-tracing (it would dial an OTLP/gRPC collector on :4317 that is not there).
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:0
    grpc:
      endpoint: 127.0.0.1:0
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`;

// One worker thread: on one machine Envoy shares its cores with the detect workers (inference). Beside
// one worker per core in the same bench run, Envoy and the quota service used no more CPU per request
// with one (a little less in each of three runs), and there is one set of upstream connections.
const ENVOY_WORKERS = 1;

export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const timeoutMs = opts.timeoutMs ?? 240_000;
  const productEnv = opts.env ?? process.env;
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-stack-'));
  const children = new Map<ChildName, Child>();
  const ports = new Map<ChildName, number>();
  const echo = opts.echo ?? false;
  const traceSampleRatio = numberSetting(productEnv, 'TRACE_SAMPLE_RATIO');

  const stop = async () => {
    // The edge first (no new requests), then the services (they drain), then what they depend on.
    const order: ChildName[] = ['envoy', 'detect', 'health', 'quota', 'jaeger', 'redis'];
    for (const group of [order.slice(0, 1), order.slice(1, 4), order.slice(4)]) {
      await Promise.all(group.map((name) => children.get(name)?.stop()));
    }
    rmSync(dir, { recursive: true, force: true });
  };

  const startRedis = async (port: number | undefined) => {
    // redis-server cannot bind port 0; take a free port and prove we hold it (retry if we lost it).
    for (let attempt = 0; ; attempt++) {
      const p = port ?? (await freePort());
      const child = new Child({
        name: 'redis',
        command: 'redis-server',
        args: ['--port', String(p), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
        echo,
      });
      children.set('redis', child);
      try {
        await waitFor(
          child,
          'redis-server to listen',
          () => (listeningPorts(child.pid).includes(p) ? true : undefined),
          15_000,
        );
        ports.set('redis', p);
        return;
      } catch (err) {
        if (port !== undefined || attempt >= 3) throw err;
      }
    }
  };

  const startJaeger = async () => {
    const config = join(dir, 'jaeger.yaml');
    writeFileSync(config, JAEGER_CONFIG);
    const child = new Child({
      name: 'jaeger',
      command: requireTool('jaeger'),
      args: ['--config', config],
      echo,
    });
    children.set('jaeger', child);
    // Three ports: OTLP/HTTP, query HTTP, query gRPC. Tell them apart by asking.
    const found = await waitFor(
      child,
      'Jaeger to listen',
      async () => {
        const candidates = listeningPorts(child.pid);
        let query: number | undefined;
        let otlp: number | undefined;
        for (const p of candidates) {
          if (await answers(`http://127.0.0.1:${p}/api/services`, 200)) query = p;
          else if (await answers(`http://127.0.0.1:${p}/v1/traces`, 200, '{}')) otlp = p;
        }
        return query && otlp ? { query, otlp } : undefined;
      },
      60_000,
    );
    ports.set('jaeger', found.query);
    return found;
  };

  // Detect takes identity headers only with this secret, which Envoy adds on the detect routes.
  const edgeSecret = productEnv.EDGE_SECRET ?? randomBytes(24).toString('hex');
  const serviceEnv = (otlpPort: number): Record<string, string | undefined> => ({
    ...productEnv,
    EDGE_SECRET: edgeSecret,
    TSX_DISABLE_CACHE: '1',
    HOST: '127.0.0.1',
    REDIS_URL: `redis://127.0.0.1:${ports.get('redis')}`,
    // Envoy appends the client to X-Forwarded-For: the services trust exactly that one hop.
    TRUSTED_PROXY_HOPS: '1',
    // Tracing off (ratio 0): Envoy samples no request and decides for every one, so nothing behind it
    // would ever be recorded; the services then run without the OpenTelemetry SDK at all (it costs
    // detect ~0.9 ms of CPU per request even when it records nothing).
    ...(traceSampleRatio > 0
      ? {
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${otlpPort}`,
          OTEL_BSP_SCHEDULE_DELAY: productEnv.OTEL_BSP_SCHEDULE_DELAY ?? '500',
        }
      : { OTEL_EXPORTER_OTLP_ENDPOINT: undefined, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: undefined }),
  });
  let envFor: Record<string, string | undefined> = {};
  // With envoy.sourceLimit on (off by default: docs/edge.md), the quota service also answers Envoy's
  // per-source connection calls, on a port of its own chosen here so that its main port is told apart.
  const sourceLimitOn = String(opts.envoyValues?.['envoy.sourceLimit.enabled']) === 'true';
  const sourceLimitPort = sourceLimitOn ? await freePort() : 0;

  const startService = async (name: ServiceName, port = 0) => {
    const spec = SERVICES[name];
    const extra: Record<string, string> =
      name === 'quota' ? { SOURCE_LIMIT_PORT: String(sourceLimitPort) } : {};
    const child = new Child({
      name,
      command: process.execPath,
      args: ['--import', 'tsx', spec.entry],
      cwd: ROOT,
      env: { ...envFor, ...extra, [spec.portVar]: String(port) },
      echo,
    });
    children.set(name, child);
    const bound = await waitFor(
      child,
      `${name} to listen`,
      () => listeningPorts(child.pid).find((p) => name !== 'quota' || p !== sourceLimitPort),
      timeoutMs,
    );
    ports.set(name, bound);
    await waitFor(
      child,
      `${name} to be ready`,
      async () => ((await answers(`http://127.0.0.1:${bound}${spec.readyPath}`, 200)) ? true : undefined),
      timeoutMs,
    );
  };

  try {
    await startRedis(undefined);
    const jaeger = await startJaeger();
    envFor = serviceEnv(jaeger.otlp);
    await Promise.all((Object.keys(SERVICES) as ServiceName[]).map((name) => startService(name)));

    // Verbatim: the very bytes the chart's ConfigMap holds (test/chart/chart.test.ts compares them).
    const envoyConfig = await renderEnvoyConfigText({
      valuesFiles: [LOCAL_VALUES],
      set: {
        'envoy.listener.port': opts.port ?? 8080,
        ...LOCAL_FILTER_VALUES,
        'envoy.upstreams.detect.port': ports.get('detect') as number,
        'envoy.upstreams.health.port': ports.get('health') as number,
        'envoy.upstreams.quota.port': ports.get('quota') as number,
        ...(sourceLimitOn ? { 'envoy.sourceLimit.port': sourceLimitPort } : {}),
        'envoy.tracing.collector.port': jaeger.otlp,
        // The edge decides for whole traces (the services are parent-based): the same ratio.
        'envoy.tracing.samplingPercent': Math.round(traceSampleRatio * 10_000) / 100,
        ...opts.envoyValues,
      },
    });
    const configPath = join(dir, 'envoy.json');
    writeFileSync(configPath, envoyConfig);
    const adminPath = join(dir, 'envoy-admin-address');
    const envoy = new Child({
      name: 'envoy',
      command: requireTool('envoy'),
      args: localEnvoyArgs(configPath, adminPath, {
        concurrency: opts.envoyWorkers ?? ENVOY_WORKERS,
        // Access log lines appear within a second (default: every 10 s).
        flushIntervalMs: 1000,
        logLevel: productEnv.ENVOY_LOG_LEVEL ?? 'warn',
      }),
      env: { ...process.env, EDGE_SECRET: edgeSecret },
      echo,
    });
    children.set('envoy', envoy);
    const adminUrl = await waitFor(envoy, 'Envoy admin address', () => envoyAdminUrl(adminPath), 30_000);
    const edgePort = await waitFor(
      envoy,
      'Envoy listener',
      () => envoyListenerPort(adminUrl, 'edge'),
      30_000,
    );
    ports.set('envoy', edgePort);
    const edgeUrl = `http://127.0.0.1:${edgePort}`;

    // Up means: a detect call through the edge (ext_authz, quota, Redis, detect, the model) succeeds.
    const probe = await sharp({ create: { width: 16, height: 16, channels: 3, background: '#808080' } })
      .jpeg()
      .toBuffer();
    await waitFor(
      envoy,
      'a detect call through Envoy to succeed',
      async () => {
        try {
          const res = await fetch(`${edgeUrl}/api/public/detect`, {
            method: 'POST',
            headers: { 'content-type': 'image/jpeg' },
            body: probe,
          });
          await res.arrayBuffer();
          return res.status === 200 ? true : undefined;
        } catch {
          return undefined;
        }
      },
      30_000,
    );

    const url = (name: ChildName) => `http://127.0.0.1:${ports.get(name)}`;
    return {
      edgeUrl,
      adminUrl,
      jaegerUrl: url('jaeger'),
      redisUrl: `redis://127.0.0.1:${ports.get('redis')}`,
      serviceUrls: { quota: url('quota'), detect: url('detect'), health: url('health') },
      dir,
      child: (name) => {
        const child = children.get(name);
        if (!child) throw new Error(`no ${name} in the stack`);
        return child;
      },
      pids: () => [...children.values()].map((c) => c.pid),
      restart: async (name) => {
        const current = children.get(name);
        if (current?.running) throw new Error(`${name} is still running`);
        if (name === 'redis') await startRedis(ports.get('redis'));
        else await startService(name, ports.get(name));
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Whether GET (or POST of a JSON `body`) to `url` answers `status`. */
async function answers(url: string, status: number, body?: string): Promise<boolean> {
  try {
    const res = await fetch(url, {
      method: body === undefined ? 'GET' : 'POST',
      ...(body === undefined ? {} : { body, headers: { 'content-type': 'application/json' } }),
      signal: AbortSignal.timeout(2_000),
    });
    await res.arrayBuffer();
    return res.status === status;
  } catch {
    return false;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}
