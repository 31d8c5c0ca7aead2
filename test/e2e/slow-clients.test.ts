// The edge under slowloris, through the real cluster topology (startStack: Envoy with the chart's
// default configuration: a bound on the connections one source holds, time bounds that shrink as the
// edge fills, docs/edge.md). One address (127.0.0.2) attacks while other addresses (127.0.0.3,
// 127.0.0.4) call health and detect, and ≥ 90% of their calls are answered 200:
// - the classic: 10,200 connections that each send one header byte every 15 s, reconnecting at their
//   next byte when cut — more than the edge's connection bound;
// - reconnecting at once: 7,000 connections, each opened again the moment Envoy closes it (the
//   finding of issue 48: thousands of new connections a second), trickling header bytes;
// - the same sending nothing at all (each waits for the idle timeout).
// Each attack holds more slots than one source may (envoy.sourceConnectionLimit.maxConnections): the
// per-source bound refuses the rest, and never lets the attacker hold more than its bound.
// Figures are printed (Envoy's connections and heap at their peak, its timeouts, the connections the
// per-source bound refused, the attacker's connections and reconnection rate, the other clients'
// latencies); only answers and counts are asserted, never timings.

import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { type Stack, startStack } from '../../tools/stack/stack.ts';
import { type Child, childEnv, spawnChild } from '../support/children.ts';
import { ROOT } from '../support/server-process.ts';
import { describeWithStackTools } from '../support/stack-tools.ts';
import { CALLS, callThroughout, summary } from './slow-clients.calls.ts';

const ATTACKER = fileURLToPath(new URL('./slowloris.run.ts', import.meta.url));
const ATTACK_MS = 150_000;
/** The chart's default per-source bound (values.yaml envoy.sourceConnectionLimit.maxConnections). */
const SOURCE_BOUND = 512;
/** The filter's metrics (Envoy prefixes a Wasm filter's own metrics with "wasmcustom."). */
const REFUSED = 'wasmcustom.source_connection_limit.refused';
const COUNTED = 'wasmcustom.source_connection_limit.open';

interface Attack {
  name: string;
  slots: number;
  /** slowloris.run.ts's environment beyond the common part. */
  env: Record<string, string>;
}

const ATTACKS: Attack[] = [
  { name: '10,200 slots from 127.0.0.2, one byte / 15 s', slots: 10_200, env: { INTERVAL_MS: '15000' } },
  {
    name: '7,000 slots from 127.0.0.2, one byte / 15 s, each reopened the moment it is closed',
    slots: 7_000,
    env: { INTERVAL_MS: '15000', RECONNECT: 'at-once' },
  },
  {
    name: '7,000 slots from 127.0.0.2 sending nothing, each reopened the moment it is closed',
    slots: 7_000,
    env: { INTERVAL_MS: '15000', RECONNECT: 'at-once', SEND: 'nothing' },
  },
];

interface AttackState {
  open: number;
  peakOpen: number;
  connects: number;
  closes: number;
  errors: number;
}

/** Envoy's counters and gauges of interest, from its admin interface. */
async function envoyStats(adminUrl: string): Promise<Record<string, number>> {
  const res = await fetch(`${adminUrl}/stats?format=json`);
  const body = (await res.json()) as { stats: Array<{ name: string; value?: number }> };
  const wanted = [
    'http.edge.downstream_cx_active',
    'http.edge.downstream_cx_total',
    'http.edge.downstream_cx_idle_timeout',
    'http.edge.downstream_rq_idle_timeout',
    'http.edge.downstream_rq_header_timeout',
    'server.memory_allocated',
    'server.memory_heap_size',
    'overload.envoy.resource_monitors.global_downstream_max_connections.pressure',
    'overload.envoy.resource_monitors.fixed_heap.pressure',
    'overload.envoy.overload_actions.reduce_timeouts.scale_percent',
    REFUSED,
    COUNTED,
    'wasmcustom.source_connection_limit.admitted',
    'wasmcustom.source_connection_limit.uncounted',
  ];
  const out: Record<string, number> = {};
  for (const s of body.stats) {
    if (wanted.includes(s.name) || /downstream_cx_overflow|overload_reject|global_cx_overflow/.test(s.name))
      out[s.name] = s.value ?? 0;
  }
  return out;
}

describeWithStackTools(
  'the edge under slowloris from one address',
  ['helm', 'envoy', 'jaeger'],
  { redis: true },
  () => {
    let stack: Stack;
    let attacker: Child | undefined;

    beforeAll(async () => {
      stack = await startStack({
        port: 0,
        env: childEnv({
          ...process.env,
          ANON_PER_MINUTE: '100000',
          ANON_PER_DAY: '1000000',
          TRACE_SAMPLE_RATIO: '0',
          LOG_LEVEL: 'warn',
        }),
      });
    }, 300_000);
    afterEach(async () => {
      await attacker?.stop(5_000);
      attacker = undefined;
    });
    afterAll(async () => {
      await stack?.stop();
    }, 60_000);

    it.each(ATTACKS)(
      'answers health and detect for other addresses throughout: $name',
      async ({ name, slots, env }) => {
        const edgePort = Number(new URL(stack.edgeUrl).port);
        // The previous attack's connections are gone (closed by its end) before this one starts.
        const settled = Date.now() + 30_000;
        while (((await envoyStats(stack.adminUrl))['http.edge.downstream_cx_active'] ?? 0) > 50) {
          expect(Date.now() < settled, "the previous attack's connections to close").toBe(true);
          await new Promise((r) => setTimeout(r, 500));
        }
        const before = await envoyStats(stack.adminUrl);
        // Each of the attacker's sockets is a file descriptor here; Envoy's are in the Envoy process.
        const running = spawnChild('slowloris', process.execPath, ['--import', 'tsx', ATTACKER], {
          cwd: ROOT,
          env: {
            ...process.env,
            EDGE_PORT: String(edgePort),
            FROM_ADDRESS: '127.0.0.2',
            SLOTS: String(slots),
            DURATION_MS: String(ATTACK_MS),
            ...env,
          },
        });
        attacker = running;
        // The attacker's last complete report line.
        const attack = (): AttackState | undefined => {
          const output = running.output();
          const complete = output.slice(0, output.lastIndexOf('\n') + 1);
          const last = complete
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .at(-1);
          return last ? (JSON.parse(last) as AttackState) : undefined;
        };
        // The attack in full: every slot has connected once.
        const deadline = Date.now() + 60_000;
        while ((attack()?.connects ?? 0) < slots) {
          expect(running.running(), running.output()).toBe(true);
          expect(Date.now() < deadline, `the attacker connected ${attack()?.connects ?? 0} of ${slots}`).toBe(
            true,
          );
          await new Promise((r) => setTimeout(r, 250));
        }

        const peak: Record<string, number> = {};
        let sampling = true;
        const sampler = (async () => {
          while (sampling) {
            const stats = await envoyStats(stack.adminUrl).catch(() => ({}) as Record<string, number>);
            for (const [stat, value] of Object.entries(stats)) peak[stat] = Math.max(peak[stat] ?? 0, value);
            await new Promise((r) => setTimeout(r, 500));
          }
        })();

        // 90 health and 90 detect calls spread over 50 s, from two other addresses, several at once.
        const attackAtStart = attack();
        const { results, seconds: callsSeconds } = await callThroughout(
          { host: '127.0.0.1', port: edgePort },
          { health: '127.0.0.3', detect: '127.0.0.4' },
        );
        sampling = false;
        await sampler;
        const during = attack();
        // Still attacking when the last call was answered.
        expect(running.running(), running.output().slice(-2000)).toBe(true);
        const final = await envoyStats(stack.adminUrl);
        const delta = (stat: string) => (final[stat] ?? 0) - (before[stat] ?? 0);

        const figures = {
          health: summary(results, 'health'),
          detect: summary(results, 'detect'),
          attacker: during,
          attackerConnectsPerSecond: Math.round(
            ((during?.connects ?? 0) - (attackAtStart?.connects ?? 0)) / callsSeconds,
          ),
          refusedBySourceBound: delta(REFUSED),
          refusedBySourceBoundPerSecond: Math.round(delta(REFUSED) / callsSeconds),
          envoyPeak: peak,
          envoyAfter: final,
        };
        console.log(`slowloris (${name}): ${JSON.stringify(figures, null, 1)}`);

        // The attack really was on: every slot connected and kept reconnecting. The per-source bound
        // refused its connections past the bound, and the attacker never held more than that: the
        // connections counted at the peak are the attacker's bound and the other clients' few.
        expect(during?.connects ?? 0).toBeGreaterThanOrEqual(slots);
        expect(delta(REFUSED)).toBeGreaterThan(slots - SOURCE_BOUND);
        expect(peak[COUNTED] ?? 0).toBeGreaterThanOrEqual(SOURCE_BOUND);
        expect(peak[COUNTED] ?? 0).toBeLessThan(SOURCE_BOUND + 2 * CALLS);
        expect(final['wasmcustom.source_connection_limit.uncounted'] ?? 0).toBe(0);
        // And everyone else was served.
        for (const kind of ['health', 'detect'] as const) {
          const { statuses } = figures[kind];
          expect(statuses['200'] ?? 0, kind).toBeGreaterThanOrEqual(Math.ceil(0.9 * CALLS));
          expect(
            Object.keys(statuses).filter((s) => s !== '200' && s !== 'ECONNRESET'),
            kind,
          ).toEqual([]);
        }
      },
      300_000,
    );
  },
);
