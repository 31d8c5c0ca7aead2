// `npx tsx edge/source-connection-limit/cost.ts [seconds]`: what the per-source bound costs Envoy,
// in CPU time per connection (docs/edge.md, "Measured"). One Envoy worker, as the stack runs it; one
// client address reconnecting from 200 slots as fast as it can, for `seconds` (default 10) in each case:
// - baseline: no filter; each connection accepted, then closed by the client at once;
// - admitted: the filter, under its bound; accepted, counted, closed by the client, released;
// - refused: the filter, the source at its bound; each connection closed by Envoy at once.
// Prints Envoy's CPU (user + system, from /proc) per connection and connections a second, beside the
// baseline of the same run. Needs Envoy (bash .ci/install-tools.sh).

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnChild } from '../../test/support/children.ts';
import { ENVOY, requireTool } from '../../test/support/tools.ts';
import { envoyAdminUrl, envoyListenerPort, localEnvoyArgs } from '../../tools/stack/local-envoy.ts';
import { listener } from './local-listener.ts';

const SECONDS = Number(process.argv[2] ?? 10);
const SLOTS = 200;
const TICKS_PER_SECOND = 100;

/** The process's CPU time (user + system), in seconds. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

async function withEnvoy<T>(
  bound: number | undefined,
  body: (port: number, pid: number) => Promise<T>,
): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'source-connection-limit-cost-'));
  const configPath = join(dir, 'envoy.json');
  const adminPath = join(dir, 'admin-address');
  writeFileSync(
    configPath,
    JSON.stringify({
      admin: { address: { socket_address: { address: '127.0.0.1', port_value: 0 } } },
      static_resources: { listeners: [listener('edge', { idle: '60s', bound })] },
    }),
  );
  const envoy = spawnChild(
    'envoy',
    requireTool(ENVOY),
    localEnvoyArgs(configPath, adminPath, { concurrency: 1, logLevel: 'error' }),
  );
  try {
    let port: number | undefined;
    for (let i = 0; i < 300 && port === undefined; i++) {
      if (!envoy.running()) throw new Error(envoy.output());
      const url = envoyAdminUrl(adminPath);
      if (url) port = await envoyListenerPort(url, 'edge');
      await new Promise((r) => setTimeout(r, 100));
    }
    if (port === undefined) throw new Error(`no listener: ${envoy.output()}`);
    return await body(port, envoy.pid);
  } finally {
    await envoy.stop(5_000);
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * SLOTS connections from `from`, each opened again the moment it closes, for SECONDS; `closeAtOnce`:
 * the client closes each as soon as it connects (else it waits for Envoy to close it). Each case has
 * an address of its own: the ports a client-side close leaves in TIME_WAIT would slow the next case.
 */
async function reconnectLoop(port: number, from: string, closeAtOnce: boolean): Promise<number> {
  let connections = 0;
  let running = true;
  const slot = async () => {
    while (running) {
      await new Promise<void>((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
        socket.on('error', () => {});
        socket.on('connect', () => {
          connections++;
          if (closeAtOnce) socket.destroy();
        });
        socket.on('close', () => resolve());
      });
    }
  };
  const slots = Array.from({ length: SLOTS }, slot);
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  running = false;
  await Promise.all(slots);
  return connections;
}

async function measure(
  name: string,
  from: string,
  bound: number | undefined,
  hold: number,
  closeAtOnce: boolean,
): Promise<{ name: string; connectionsPerSecond: number; envoyCpuMicrosecondsPerConnection: number }> {
  return withEnvoy(bound, async (port, pid) => {
    // The source's held connections (its bound, for the refused case).
    const held = await Promise.all(
      Array.from(
        { length: hold },
        () =>
          new Promise<net.Socket>((resolve) => {
            const s = net.connect({ host: '127.0.0.1', port, localAddress: from }, () => resolve(s));
          }),
      ),
    );
    await new Promise((r) => setTimeout(r, 500));
    const cpuBefore = cpuSeconds(pid);
    const connections = await reconnectLoop(port, from, closeAtOnce);
    const cpu = cpuSeconds(pid) - cpuBefore;
    for (const s of held) s.destroy();
    return {
      name,
      connectionsPerSecond: Math.round(connections / SECONDS),
      envoyCpuMicrosecondsPerConnection: Math.round((cpu / connections) * 1e6),
    };
  });
}

const results = [
  await measure('baseline: no filter, accepted and closed by the client', '127.0.0.12', undefined, 0, true),
  await measure('admitted: under the bound, counted and released', '127.0.0.13', 1_000_000, 0, true),
  await measure('refused: the source at its bound, closed by Envoy at once', '127.0.0.14', 4, 4, false),
];
console.log(
  JSON.stringify(
    { cpu: cpus()[0]?.model, cores: cpus().length, seconds: SECONDS, slots: SLOTS, results },
    null,
    1,
  ),
);
