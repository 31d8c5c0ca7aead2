// The chart's Envoy configuration, rendered with `helm template` as a deployment and the local stack
// render it: accepted by the real Envoy (`--mode validate`), and holding what the edge must guarantee.
// Lists and envelopes are compared with their sources in the code, so they cannot drift apart.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FILTER_WASM } from '../../edge/source-connection-limit/build.ts';
import { loadCoreConfig } from '../../lib/common/config.ts';
import { ERRORS } from '../../lib/common/errors.ts';
import {
  MAX_REQUEST_HEADER_BYTES,
  MAX_REQUEST_HEADERS,
  maxHeaderBytes,
  PROXY_ADDED_HEADER_BYTES,
} from '../../lib/common/http-limits.ts';
import { refusedBodyBounds } from '../../lib/common/root-app.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { loadPolicyConfig } from '../../lib/policy/policy-config.ts';
import { DRAINING_HEADER } from '../../services/detect/work-gate.ts';
import {
  CHECK_REQUEST_HEADERS,
  CLIENT_HEADERS_ON_DENY,
  CLIENT_HEADERS_ON_SUCCESS,
  DEFAULT_PATH_PREFIX,
  UPSTREAM_HEADERS,
} from '../../services/quota/ext-authz.ts';
import {
  CHART_DIR,
  type EnvoyConfig,
  LOCAL_FILTER_VALUES,
  LOCAL_VALUES,
  renderEnvoyConfig,
} from '../../tools/stack/render-envoy.ts';
import { requireTool } from '../../tools/stack/tools.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';

const execFileAsync = promisify(execFile);

// biome-ignore lint/suspicious/noExplicitAny: walking Envoy's JSON configuration
type Json = any;

function hcm(config: EnvoyConfig): Json {
  const listener = (config as Json).static_resources.listeners.find((l: Json) => l.name === 'edge');
  return listener.filter_chains[0].filters.find(
    (f: Json) => f.name === 'envoy.filters.network.http_connection_manager',
  ).typed_config;
}

function filter(config: EnvoyConfig, name: string): Json {
  return hcm(config).http_filters.find((f: Json) => f.name === name)?.typed_config;
}

function networkFilters(config: EnvoyConfig): Json[] {
  return (config as Json).static_resources.listeners.find((l: Json) => l.name === 'edge').filter_chains[0]
    .filters;
}

/**
 * The configuration as this machine's Envoy can validate it: Envoy loads the Wasm filter while it
 * validates, from the gateway's /etc/envoy in a deployment, here from the chart's own copy.
 */
function withLocalFilter(config: EnvoyConfig): EnvoyConfig {
  const copy = structuredClone(config) as Json;
  for (const f of networkFilters(copy))
    if (f.name === 'envoy.filters.network.wasm')
      f.typed_config.config.vm_config.code.local.filename = FILTER_WASM;
  return copy;
}

const names = (matcher: Json): string[] =>
  matcher.patterns.map((p: Json) => {
    expect(p.ignore_case).toBe(true);
    return p.exact;
  });

describeWithStackTools('the chart Envoy configuration', ['helm', 'envoy'], {}, () => {
  let dir: string;
  let deployed: EnvoyConfig;
  let local: EnvoyConfig;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-envoy-config-'));
    [deployed, local] = await Promise.all([
      renderEnvoyConfig(),
      renderEnvoyConfig({
        valuesFiles: [LOCAL_VALUES],
        set: { 'envoy.upstreams.detect.port': 18080, ...LOCAL_FILTER_VALUES },
      }),
    ]);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is accepted by the real Envoy (envoy --mode validate), for a deployment and for the local stack', async () => {
    for (const [name, config] of [
      ['deployed', deployed],
      ['local', local],
    ] as const) {
      const path = join(dir, `${name}.json`);
      writeFileSync(path, JSON.stringify(withLocalFilter(config)));
      const { stdout } = await execFileAsync(requireTool('envoy'), ['--mode', 'validate', '-c', path]);
      expect(stdout).toMatch(/OK/);
    }
  });

  it('renders the local values: loopback upstreams and the given ports', () => {
    const clusters = (local as Json).static_resources.clusters;
    const detect = clusters.find((c: Json) => c.name === 'detect');
    const address = detect.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    expect(address).toEqual({ address: '127.0.0.1', port_value: 18080 });
    expect(detect.type).toBe('STATIC');
    const deployedDetect = (deployed as Json).static_resources.clusters.find(
      (c: Json) => c.name === 'detect',
    );
    // A host per address of detect's headless Service (one per ready pod), looked up every second.
    expect(deployedDetect.type).toBeUndefined();
    expect(deployedDetect.cluster_type.name).toBe('envoy.cluster.dns');
    expect(deployedDetect.cluster_type.typed_config.dns_refresh_rate).toBe('1s');
    const deployedAddress =
      deployedDetect.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address;
    expect(deployedAddress).toBe('nsfwdetector-detect-pods');
    const health = (deployed as Json).static_resources.clusters.find((c: Json) => c.name === 'health');
    expect(health.type).toBe('STRICT_DNS');
  });

  it('calls ext_authz with the header lists services/quota/ext-authz.ts exports, failing closed', () => {
    const authz = filter(local, 'envoy.filters.http.ext_authz');
    expect(names(authz.allowed_headers).sort()).toEqual([...CHECK_REQUEST_HEADERS].sort());
    const response = authz.http_service.authorization_response;
    expect(names(response.allowed_upstream_headers).sort()).toEqual([...UPSTREAM_HEADERS].sort());
    expect(names(response.allowed_client_headers_on_success).sort()).toEqual(
      [...CLIENT_HEADERS_ON_SUCCESS].sort(),
    );
    expect(names(response.allowed_client_headers).sort()).toEqual([...CLIENT_HEADERS_ON_DENY].sort());
    expect(authz.http_service.path_prefix).toBe(DEFAULT_PATH_PREFIX);
    expect(authz.failure_mode_allow).toBe(false);
    expect(authz.status_on_error).toEqual({ code: 'ServiceUnavailable' });
    expect(authz.http_service.server_uri.timeout).toMatch(/^\d+(\.\d+)?s$/);
    // Above the quota service's own worst case (a Cluster's two Redis commands, each at the default
    // bound), so that it answers a Redis failure itself; and still a quick 503 when it cannot answer.
    const seconds = Number.parseFloat(authz.http_service.server_uri.timeout);
    expect(seconds * 1000).toBeGreaterThan(2 * loadCoreConfig({}).redis.commandTimeoutMs);
    expect(seconds).toBeLessThanOrEqual(2);
    // No body to the quota service: the upload is never buffered at the edge.
    expect(authz.with_request_body).toBeUndefined();
  });

  it('strips client-sent identity headers before ext_authz, and has no buffering filter', () => {
    const filters: string[] = hcm(local).http_filters.map((f: Json) => f.name);
    expect(filters.indexOf('envoy.filters.http.header_mutation')).toBeLessThan(
      filters.indexOf('envoy.filters.http.ext_authz'),
    );
    expect(filters.at(-1)).toBe('envoy.filters.http.router');
    expect(filters.some((f) => f.includes('buffer'))).toBe(false);
    const removed = filter(local, 'envoy.filters.http.header_mutation').mutations.request_mutations.map(
      (m: Json) => m.remove,
    );
    expect(removed.sort()).toEqual([...UPSTREAM_HEADERS].sort());
  });

  it('refuses a body declared longer than detect would read of a refused one, after ext_authz', () => {
    const filters: string[] = hcm(deployed).http_filters.map((f: Json) => f.name);
    expect(filters.indexOf('envoy.filters.http.lua')).toBe(
      filters.indexOf('envoy.filters.http.ext_authz') + 1,
    );
    const lua: string = filter(deployed, 'envoy.filters.http.lua').default_source_code.inline_string;
    expect(lua).toContain(`length > ${refusedBodyBounds(loadPolicyConfig({}).maxFileBytes).maxBytes} then`);
    expect(lua).toContain('[":status"] = "413"');
  });

  it('answers in the spec envelope when Envoy replies itself, with the codes and messages of the errors table', () => {
    const mappers: Json[] = hcm(local).local_reply_config.mappers;
    const bodies = mappers
      .filter((m) => m.body_format_override)
      .map((m) => JSON.parse(m.body_format_override.text_format_source.inline_string));
    for (const body of bodies) {
      const entry = Object.values(ERRORS).find((e) => e.code === body.code);
      expect(entry, `code ${body.code} is in the errors table`).toBeDefined();
      expect(body.message).toBe(entry?.message);
    }
    const byCode = new Map(
      mappers
        .filter((m) => m.body_format_override)
        .map((m) => [JSON.parse(m.body_format_override.text_format_source.inline_string).code, m]),
    );
    expect(byCode.get(ERRORS.FILE_TOO_LARGE.code).status_code).toBe(ERRORS.FILE_TOO_LARGE.status);
    expect(byCode.get(ERRORS.NOT_FOUND.code).status_code).toBe(404);
    const unavailable = byCode.get(ERRORS.UNAVAILABLE.code);
    expect(unavailable.status_code).toBe(503);
    expect(unavailable.headers_to_add[0].header.key).toBe('retry-after');
    // The quota service's own refusals (flag UAEX, 4xx) come first and pass untouched.
    expect(mappers[0].filter.and_filter.filters[0].response_flag_filter.flags).toEqual(['UAEX']);
    expect(mappers[0].body_format_override).toBeUndefined();
  });

  it('deploys every service behind the edge to take what the edge passes plus what it adds', async () => {
    const { stdout } = await execFileAsync(requireTool('helm'), ['template', 'nsfwdetector', CHART_DIR], {
      maxBuffer: 16 * 1024 * 1024,
    });
    const hops = [...stdout.matchAll(/name: TRUSTED_PROXY_HOPS, value: "(\d+)"/g)].map((m) => m[1] as string);
    expect(hops.length).toBeGreaterThanOrEqual(2); // detect and quota
    const passed = hcm(deployed).max_request_headers_kb * 1024;
    for (const value of hops) {
      const { trustedProxyHops } = loadCoreConfig({ TRUSTED_PROXY_HOPS: value });
      expect(maxHeaderBytes(trustedProxyHops), `TRUSTED_PROXY_HOPS=${value}`).toBeGreaterThanOrEqual(
        passed + PROXY_ADDED_HEADER_BYTES,
      );
    }
  });

  it("has the services' framing limits, and answers what its codec refuses as the spec says (431/4310, 400/4001)", () => {
    expect(hcm(deployed).max_request_headers_kb * 1024).toBe(MAX_REQUEST_HEADER_BYTES);
    expect(hcm(deployed).common_http_protocol_options.max_headers_count).toBe(MAX_REQUEST_HEADERS);
    const mappers: Json[] = hcm(deployed).local_reply_config.mappers;
    const forStatus = (status: number) =>
      mappers.find((m) => {
        const comparison = m.filter.status_code_filter?.comparison;
        const limit = comparison?.value.default_value;
        return comparison?.op === 'EQ' ? limit === status : comparison?.op === 'GE' && status >= limit;
      });
    const answer = (status: number) => {
      const m = forStatus(status);
      return {
        status: m?.status_code ?? status,
        code: JSON.parse(m?.body_format_override.text_format_source.inline_string).code,
      };
    };
    expect(answer(431)).toEqual({ status: 431, code: ERRORS.HEADERS_TOO_LARGE.code });
    expect(answer(501)).toEqual({ status: 400, code: ERRORS.BAD_REQUEST.code });
    expect(answer(426)).toEqual({ status: 400, code: ERRORS.BAD_REQUEST.code });
    expect(answer(403)).toEqual({ status: 400, code: ERRORS.BAD_REQUEST.code });
    expect(answer(502)).toEqual({ status: 503, code: ERRORS.UNAVAILABLE.code });
  });

  it('counts the real client: remote address, trusted hops from the values', async () => {
    expect(hcm(deployed).use_remote_address).toBe(true);
    expect(hcm(deployed).xff_num_trusted_hops).toBe(0);
    const behindLb = await renderEnvoyConfig({ set: { 'envoy.xffNumTrustedHops': 2 } });
    expect(hcm(behindLb).xff_num_trusted_hops).toBe(2);
  });

  it('retries only detect requests, on another pod, within a budget; bounds every cluster and route; keeps admin on loopback, traces and logs JSON', () => {
    const config = deployed as Json;
    expect(config.admin.address.socket_address.address).toBe('127.0.0.1');
    const monitor = config.overload_manager.resource_monitors[0];
    expect(monitor.name).toBe('envoy.resource_monitors.global_downstream_max_connections');
    expect(monitor.typed_config.max_active_downstream_connections).toBeGreaterThan(0);
    for (const cluster of config.static_resources.clusters) {
      const thresholds = cluster.circuit_breakers.thresholds[0];
      if (cluster.name === 'detect') {
        expect(thresholds.retry_budget.budget_percent.value).toBeGreaterThan(0);
        expect(thresholds.retry_budget.budget_percent.value).toBeLessThanOrEqual(50);
      } else {
        expect(thresholds.max_retries, cluster.name).toBe(0);
      }
      expect(thresholds.max_requests, cluster.name).toBeGreaterThan(0);
      expect(cluster.connect_timeout, cluster.name).toMatch(/s$/);
    }
    const routes: Json[] = hcm(deployed).route_config.virtual_hosts[0].routes;
    for (const route of routes) {
      expect(route.route.timeout, JSON.stringify(route.match)).toMatch(/s$/);
      if (route.route.cluster !== 'detect') {
        expect(route.route.retry_policy, JSON.stringify(route.match)).toBeUndefined();
        continue;
      }
      // Only what never got an answer, or a draining pod's refusal (marked by detect), to another host,
      // a bounded number of times, with the body kept up to a bound; never another answer of detect's (a
      // busy 503 goes back to the client). The mark never reaches the client.
      const retry = route.route.retry_policy;
      expect(retry.retry_on.split(',').sort()).toEqual(
        ['connect-failure', 'refused-stream', 'reset', 'retriable-headers'].sort(),
      );
      expect(retry.retriable_headers).toEqual([{ name: DRAINING_HEADER, present_match: true }]);
      expect(route.response_headers_to_remove).toEqual([DRAINING_HEADER]);
      expect(retry.retriable_status_codes).toBeUndefined();
      expect(retry.num_retries).toBeGreaterThanOrEqual(1);
      expect(retry.num_retries).toBeLessThanOrEqual(3);
      expect(retry.retry_host_predicate[0].name).toBe('envoy.retry_host_predicates.previous_hosts');
      expect(route.request_body_buffer_limit).toBeGreaterThan(0);
      expect(route.request_body_buffer_limit).toBeLessThan(
        (config.overload_manager.resource_monitors[1].typed_config.max_heap_size_bytes as number) / 8,
      );
    }
    // detect's pods are health-checked on their readiness route and ejected on connection failures.
    const detect = config.static_resources.clusters.find((c: Json) => c.name === 'detect');
    expect(detect.health_checks[0].http_health_check.path).toBe('/internal/ready');
    expect(detect.outlier_detection.consecutive_local_origin_failure).toBeGreaterThan(0);
    expect(detect.outlier_detection.enforcing_consecutive_5xx).toBe(0);
    // A connection holding unacknowledged data to a vanished pod is closed (TCP_USER_TIMEOUT) well
    // before a client gives up, so that its request is retried (test/e2e/edge-retry.test.ts runs it).
    const userTimeout = detect.upstream_bind_config.socket_options.find(
      (o: Json) => o.level === 6 && o.name === 18,
    );
    expect(userTimeout.int_value).toBeGreaterThan(0);
    expect(userTimeout.int_value).toBeLessThan(30_000);
    expect(detect.upstream_bind_config.source_address).toBeUndefined();
    const tracing = hcm(deployed).tracing.provider;
    expect(tracing.name).toBe('envoy.tracers.opentelemetry');
    expect(tracing.typed_config.http_service.http_uri.cluster).toBe('trace_collector');
    const log = hcm(deployed).access_log[0].typed_config.log_format.json_format;
    expect(log.trace_id).toBe('%TRACE_ID%');
  });

  it('with envoy.sourceLimit on, asks the quota sidecar about every new connection by its source, before reading it; never behind a balancer', async () => {
    // Off by default (docs/edge.md): no filter, no cluster.
    for (const config of [deployed, local]) {
      expect(networkFilters(config).map((f: Json) => f.name)).toEqual([
        'envoy.filters.network.wasm',
        'envoy.filters.network.http_connection_manager',
      ]);
      expect((config as Json).static_resources.clusters.map((c: Json) => c.name)).not.toContain(
        'source_limit',
      );
    }
    const on = { 'envoy.sourceLimit.enabled': 'true' };
    const [deployedOn, localOn] = await Promise.all([
      renderEnvoyConfig({ set: on }),
      renderEnvoyConfig({
        valuesFiles: [LOCAL_VALUES],
        set: { ...on, 'envoy.upstreams.detect.port': 18080 },
      }),
    ]);
    for (const config of [deployedOn, localOn]) {
      const [, first, second] = networkFilters(config);
      expect(first.name).toBe('envoy.filters.network.ratelimit');
      expect(second.name).toBe('envoy.filters.network.http_connection_manager');
      const rl = first.typed_config;
      expect(rl.descriptors).toEqual([
        { entries: [{ key: 'source', value: '%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%' }] },
      ]);
      // No answer in time, or no sidecar: the connection is let in (the global bounds still hold).
      expect(rl.failure_mode_deny).toBe(false);
      expect(rl.rate_limit_service.grpc_service.envoy_grpc.cluster_name).toBe('source_limit');
      const cluster = (config as Json).static_resources.clusters.find((c: Json) => c.name === 'source_limit');
      expect(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address).toEqual({
        address: '127.0.0.1',
        port_value: 8084,
      });
      expect(
        cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']
          .explicit_http_config.http2_protocol_options.max_outbound_control_frames,
      ).toBeGreaterThan(1000);
    }
    // The real Envoy accepts it.
    const path = join(dir, 'source-limit.json');
    writeFileSync(path, JSON.stringify(withLocalFilter(deployedOn)));
    expect((await execFileAsync(requireTool('envoy'), ['--mode', 'validate', '-c', path])).stdout).toMatch(
      /OK/,
    );
    // Behind a load balancer the socket's peer is the balancer: no per-source bound is rendered.
    const behind = (await renderEnvoyConfig({ set: { ...on, 'envoy.xffNumTrustedHops': 1 } })) as Json;
    const filters = behind.static_resources.listeners[0].filter_chains[0].filters.map((f: Json) => f.name);
    expect(filters).toEqual(['envoy.filters.network.http_connection_manager']);
    expect(behind.static_resources.clusters.map((c: Json) => c.name)).not.toContain('source_limit');
  });

  it('bounds the connections each source holds (the Wasm filter, first, shipped in the ConfigMap); never behind a balancer', async () => {
    for (const config of [deployed, local]) {
      const [first] = networkFilters(config);
      expect(first.name).toBe('envoy.filters.network.wasm');
      const plugin = first.typed_config.config;
      expect(plugin.configuration.value).toBe('max_connections=512 ipv6_prefix_bits=64 buckets=16384');
      // An IPv6 source is the network the services count a client by.
      expect(plugin.configuration.value).toContain(
        `ipv6_prefix_bits=${SETTINGS.CLIENT_IPV6_PREFIX_LENGTH.default}`,
      );
      // Should the filter fail, connections are let in: the global bound and the timeouts still hold.
      expect(plugin.failure_policy).toBe('FAIL_OPEN');
      // One VM id: every worker's VM shares the counts.
      expect(plugin.vm_config.vm_id).toBe('source_connection_limit');
      expect(plugin.vm_config.runtime).toBe('envoy.wasm.runtime.v8');
    }
    // A deployment reads it beside envoy.yaml (the ConfigMap is mounted at /etc/envoy), the stack
    // from the chart's file; the ConfigMap holds that file's bytes.
    const code = (config: EnvoyConfig) => networkFilters(config)[0].typed_config.config.vm_config.code.local;
    expect(code(deployed).filename).toBe('/etc/envoy/source-connection-limit.wasm');
    expect(code(local).filename).toBe(FILTER_WASM);
    const { stdout: manifest } = await execFileAsync(requireTool('helm'), [
      'template',
      'nsfwdetector',
      CHART_DIR,
      '--show-only',
      'templates/envoy-configmap.yaml',
    ]);
    const binary = /^ {2}source-connection-limit\.wasm: (\S+)$/m.exec(manifest)?.[1];
    expect(Buffer.from(binary ?? '', 'base64').equals(readFileSync(FILTER_WASM))).toBe(true);
    // Behind a load balancer the socket's peer is the balancer: neither the filter nor its binary.
    const behind = await renderEnvoyConfig({ set: { 'envoy.xffNumTrustedHops': 1 } });
    expect(networkFilters(behind).map((f: Json) => f.name)).toEqual([
      'envoy.filters.network.http_connection_manager',
    ]);
    const { stdout: behindManifest } = await execFileAsync(requireTool('helm'), [
      'template',
      'nsfwdetector',
      CHART_DIR,
      '--show-only',
      'templates/envoy-configmap.yaml',
      '--set',
      'envoy.xffNumTrustedHops=1',
    ]);
    expect(behindManifest).not.toContain('binaryData');
    // And off when asked.
    const off = await renderEnvoyConfig({ set: { 'envoy.sourceConnectionLimit.enabled': 'false' } });
    expect(networkFilters(off).map((f: Json) => f.name)).toEqual([
      'envoy.filters.network.http_connection_manager',
    ]);
  });

  it('bounds slow and idle clients, and sheds load on connections and heap before either runs out (docs/edge.md)', () => {
    const config = deployed as Json;
    const seconds = (d: string) => {
      expect(d).toMatch(/^\d+(\.\d+)?s$/);
      return Number.parseFloat(d);
    };
    // A request's headers, however they trickle, and a connection with nothing in flight are bounded.
    const requestHeaders = seconds(hcm(deployed).request_headers_timeout);
    const idle = seconds(hcm(deployed).common_http_protocol_options.idle_timeout);
    const streamIdle = seconds(hcm(deployed).stream_idle_timeout);
    expect(requestHeaders).toBeGreaterThan(0);
    expect(requestHeaders).toBeLessThan(streamIdle);
    expect(idle).toBeGreaterThan(0);
    expect(idle).toBeLessThan(3600);
    const om = config.overload_manager;
    const monitors = om.resource_monitors.map((m: Json) => m.name);
    expect(monitors).toEqual([
      'envoy.resource_monitors.global_downstream_max_connections',
      'envoy.resource_monitors.fixed_heap',
    ]);
    // The heap bound is below the gateway container's memory limit (256 Mi by default).
    expect(om.resource_monitors[1].typed_config.max_heap_size_bytes).toBeLessThan(256 * 1024 * 1024);
    const action = (name: string) => om.actions.find((a: Json) => a.name === name);
    // Both pressures shrink the idle and stream-idle times, to minimums below the unpressed ones.
    const reduce = action('envoy.overload_actions.reduce_timeouts');
    expect(reduce.triggers.map((t: Json) => t.name)).toEqual(monitors);
    for (const t of reduce.triggers)
      expect(t.scaled.scaling_threshold).toBeLessThan(t.scaled.saturation_threshold);
    const minimum = (timer: string) =>
      seconds(reduce.typed_config.timer_scale_factors.find((f: Json) => f.timer === timer).min_timeout);
    expect(minimum('HTTP_DOWNSTREAM_CONNECTION_IDLE')).toBeLessThan(idle);
    expect(minimum('HTTP_DOWNSTREAM_STREAM_IDLE')).toBeLessThan(requestHeaders);
    // On the heap: keep-alive off, then shrink and reset the largest streams, then refuse connections,
    // then requests — in that order of pressure.
    const at = (name: string) => action(name).triggers[0].threshold.value;
    const refuseConnections = om.loadshed_points.find(
      (p: Json) => p.name === 'envoy.load_shed_points.tcp_listener_accept',
    ).triggers[0].threshold.value;
    const order = [
      at('envoy.overload_actions.disable_http_keepalive'),
      at('envoy.overload_actions.shrink_heap'),
      refuseConnections,
      at('envoy.overload_actions.stop_accepting_requests'),
    ];
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(order.at(-1)).toBeLessThan(1);
    expect(action('envoy.overload_actions.reset_high_memory_stream').triggers[0].scaled).toBeDefined();
    expect(om.buffer_factory_config.minimum_account_to_track_power_of_two).toBeGreaterThan(0);
    // The local stack runs the same bounds.
    expect((local as Json).overload_manager).toEqual(om);
    expect(hcm(local).request_headers_timeout).toBe(hcm(deployed).request_headers_timeout);
  });

  it('routes each path to its service; health and console skip ext_authz, detect does not', () => {
    const routes: Json[] = hcm(deployed).route_config.virtual_hosts[0].routes;
    const target = (path: string) =>
      routes.find((r) => r.match.path === path || (r.match.prefix && path.startsWith(r.match.prefix)));
    const expected: Array<[string, string, boolean]> = [
      ['/api/public/detect', 'detect', true],
      ['/api/open/detect', 'detect', true],
      ['/api/public/health', 'health', false],
      ['/openapi.json', 'health', false],
      ['/docs/api', 'health', false],
      ['/docs/api/static/swagger-ui-bundle.js', 'health', false],
      ['/docs/api/json', 'health', false],
      ['/docs/skill.md', 'health', false],
      ['/skill/nsfwdetector.md', 'health', false],
      ['/console', 'quota', false],
      ['/console/api/keys', 'quota', false],
    ];
    for (const [path, cluster, authorized] of expected) {
      const route = target(path);
      expect(route?.route.cluster, path).toBe(cluster);
      const disabled = route?.typed_per_filter_config?.['envoy.filters.http.ext_authz']?.disabled === true;
      expect(disabled, `${path} skips ext_authz`).toBe(!authorized);
    }
    expect(target('/ext_authz/api/public/detect')).toBeUndefined();
    expect(target('/internal/ready')).toBeUndefined();
  });
});
