// The per-source connection bound in the real Envoy (the chart's binary, two workers so that the
// counts are shared across threads): a source at its bound has its next connection closed at once,
// before any answer, while other sources connect; a connection gives its count back when it closes —
// closed by the client, or by Envoy's own idle timeout; a burst from one source across both workers
// gets exactly the bound. The metrics tell refusals, admissions and the connections still counted.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Child, spawnChild } from '../../test/support/children.ts';
import { describeWithTool, ENVOY, requireTool } from '../../test/support/tools.ts';
import { envoyAdminUrl, envoyListenerPort, localEnvoyArgs } from '../../tools/stack/local-envoy.ts';
import { listener } from './local-listener.ts';

const BOUND = 3;

/** A connection from `from`, and what its first request got: Envoy's answer, or closed without one. */
interface Connection {
  socket: net.Socket;
  outcome: Promise<'200' | 'closed'>;
}

function connect(port: number, from: string): Connection {
  const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
  socket.on('error', () => {});
  const outcome = new Promise<'200' | 'closed'>((resolve) => {
    let got = '';
    socket.on('connect', () => socket.write('GET / HTTP/1.1\r\nhost: edge\r\n\r\n'));
    socket.on('data', (d) => {
      got += d.toString('latin1');
      if (got.includes('\r\n\r\n')) resolve(got.startsWith('HTTP/1.1 200') ? '200' : 'closed');
    });
    socket.on('close', () => resolve('closed'));
  });
  return { socket, outcome };
}

const closed = (c: Connection) =>
  new Promise<void>((resolve) => (c.socket.destroyed ? resolve() : c.socket.once('close', () => resolve())));

describeWithTool(ENVOY, 'the per-source connection bound (Wasm filter) in Envoy', () => {
  let dir: string;
  let envoy: Child;
  let adminUrl: string;
  let port: number;
  let shortIdlePort: number;
  const stat = async (name: string): Promise<number> => {
    const text = await (
      await fetch(`${adminUrl}/stats?filter=${encodeURIComponent(`^wasmcustom.${name}$`)}`)
    ).text();
    const line = text.split('\n').find((l) => l.startsWith(`wasmcustom.${name}: `));
    return line ? Number(line.split(': ')[1]) : 0;
  };
  // A gauge is read until it shows `value` (connections close asynchronously).
  const until = async (name: string, value: number) => {
    for (let i = 0; i < 200 && (await stat(name)) !== value; i++) await new Promise((r) => setTimeout(r, 50));
    return stat(name);
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'source-connection-limit-'));
    const config = {
      admin: { address: { socket_address: { address: '127.0.0.1', port_value: 0 } } },
      static_resources: {
        listeners: [
          listener('edge', { idle: '60s', bound: BOUND }),
          listener('short_idle', { idle: '1s', bound: BOUND }),
        ],
      },
    };
    const configPath = join(dir, 'envoy.json');
    writeFileSync(configPath, JSON.stringify(config));
    const adminPath = join(dir, 'admin-address');
    envoy = spawnChild(
      'envoy',
      requireTool(ENVOY),
      localEnvoyArgs(configPath, adminPath, { concurrency: 2, logLevel: 'warn' }),
    );
    for (let i = 0; i < 300 && (port === undefined || shortIdlePort === undefined); i++) {
      expect(envoy.running(), envoy.output()).toBe(true);
      const url = envoyAdminUrl(adminPath);
      if (url) {
        adminUrl = url;
        port = (await envoyListenerPort(url, 'edge')) as number;
        shortIdlePort = (await envoyListenerPort(url, 'short_idle')) as number;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(port && shortIdlePort, envoy.output()).toBeTruthy();
  }, 60_000);
  afterAll(async () => {
    await envoy?.stop(5_000);
    rmSync(dir, { recursive: true, force: true });
  });

  it('holds a source at its bound, closes its next connection at once, serves other sources, and counts again once one closes', async () => {
    const held = Array.from({ length: BOUND }, () => connect(port, '127.0.0.2'));
    expect(await Promise.all(held.map((c) => c.outcome))).toEqual(Array(BOUND).fill('200'));
    // The next one from the same source: closed before any answer, and not counted.
    const refused = connect(port, '127.0.0.2');
    expect(await refused.outcome).toBe('closed');
    expect(await stat('source_connection_limit.refused')).toBe(1);
    // Another source is not bound by the first one's count.
    const other = connect(port, '127.0.0.3');
    expect(await other.outcome).toBe('200');
    expect(await until('source_connection_limit.open', BOUND + 1)).toBe(BOUND + 1);

    // The attacker closes one: its count is given back, and it may connect again (once).
    held[0]?.socket.destroy();
    expect(await until('source_connection_limit.open', BOUND)).toBe(BOUND);
    const again = connect(port, '127.0.0.2');
    expect(await again.outcome).toBe('200');
    expect(await connect(port, '127.0.0.2').outcome).toBe('closed');
    expect(await stat('source_connection_limit.refused')).toBe(2);

    for (const c of [...held, other, again]) c.socket.destroy();
    // Every counted connection released exactly once: nothing is counted, and the source has its
    // whole bound back.
    expect(await until('source_connection_limit.open', 0)).toBe(0);
    const back = Array.from({ length: BOUND }, () => connect(port, '127.0.0.2'));
    expect(await Promise.all(back.map((c) => c.outcome))).toEqual(Array(BOUND).fill('200'));
    for (const c of back) c.socket.destroy();
    expect(await until('source_connection_limit.open', 0)).toBe(0);
    expect(await stat('source_connection_limit.uncounted')).toBe(0);
  });

  it('gives the count back when Envoy closes the connection itself (idle timeout)', async () => {
    const idle = Array.from({ length: BOUND }, () => connect(shortIdlePort, '127.0.0.4'));
    expect(await Promise.all(idle.map((c) => c.outcome))).toEqual(Array(BOUND).fill('200'));
    // Left idle: Envoy closes each after 1 s, and the source may open as many again.
    await Promise.all(idle.map(closed));
    expect(await until('source_connection_limit.open', 0)).toBe(0);
    const next = Array.from({ length: BOUND }, () => connect(port, '127.0.0.4'));
    expect(await Promise.all(next.map((c) => c.outcome))).toEqual(Array(BOUND).fill('200'));
    for (const c of next) c.socket.destroy();
    expect(await until('source_connection_limit.open', 0)).toBe(0);
  });

  it('a burst of 60 connections from one source, across both workers, gets exactly the bound', async () => {
    const refusedBefore = await stat('source_connection_limit.refused');
    const burst = Array.from({ length: 60 }, () => connect(port, '127.0.0.5'));
    const outcomes = await Promise.all(burst.map((c) => c.outcome));
    const served = outcomes.filter((o) => o === '200').length;
    console.log(`burst of 60 from one source: ${served} served, ${60 - served} closed at once`);
    expect(served).toBe(BOUND);
    expect((await stat('source_connection_limit.refused')) - refusedBefore).toBe(60 - BOUND);
    for (const c of burst) c.socket.destroy();
    expect(await until('source_connection_limit.open', 0)).toBe(0);
  });
});
