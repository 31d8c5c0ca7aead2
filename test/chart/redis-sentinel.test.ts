// The in-chart Redis with `redis.architecture: sentinel` runs charts/nsfwdetector/files/redis-node.sh in
// every pod (a data node and a sentinel). This runs that very script with the real redis-server on
// loopback — three nodes, three sentinels, as the StatefulSet does, only with ports on one address
// instead of the pods' own Services' ClusterIPs — and shows that what the chart ships elects a primary,
// replicates with WAIT, fails over when the primary is SIGKILLed (nothing acknowledged lost, the quota
// services' own Sentinel client follows), and takes the old primary back as a replica of the new one
// when its pod restarts; that a primary being stopped hands over by itself (the preStop hook:
// `redis-node.sh handover`) without losing a write; that it takes addresses only, never a name; and
// that a primary named by DNS (a sentinel of a release before 0.4.0, during an upgrade) is the node of
// that ordinal.

import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { redisTargetVar } from '../../lib/common/redis-target.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import {
  closeRedis,
  connectRedis,
  LuaScript,
  type RedisClient,
  redisReady,
} from '../../services/quota/stores/redis-connection.ts';
import { type Child, spawnChild } from '../support/children.ts';
import { describeWithTool, REDIS_CLI, REDIS_SERVER, requireTool } from '../support/tools.ts';

/** A write as the quota's counters make them: a script. */
const SET_BY_SCRIPT = new LuaScript("return redis.call('SET', KEYS[1], ARGV[1])");

import { CHART_DIR } from './helm.ts';

const execFileAsync = promisify(execFile);
const SCRIPT = join(CHART_DIR, 'files', 'redis-node.sh');
const PASSWORD = 'sentinel-test-password';
const MASTER = 'nsfwdetector';
const NODES = 3;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

describeWithTool([REDIS_SERVER, REDIS_CLI], 'the chart’s Redis Sentinel script on real redis-server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-redis-node-'));
  const redisPorts: number[] = [];
  const sentinelPorts: number[] = [];
  const redis = new Map<number, Child>();
  const sentinels: Child[] = [];
  let client: RedisClient | undefined;
  let path = '';

  const cli = async (port: number, ...args: string[]): Promise<string> => {
    const { stdout } = await execFileAsync(requireTool(REDIS_CLI), ['-p', String(port), '--raw', ...args], {
      env: { ...process.env, REDISCLI_AUTH: PASSWORD },
    });
    return stdout.trim();
  };
  const until = async (what: string, probe: () => Promise<boolean>, timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await probe().catch(() => false)) return;
      if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const primaryPort = async (sentinel: number) =>
    Number((await cli(sentinel, 'sentinel', 'get-master-addr-by-name', MASTER)).split('\n')[1]);

  const nodeEnv = (role: string, self: number) => ({
    ...process.env,
    PATH: path,
    NODES: redisPorts.map((p, i) => `127.0.0.1:${p}:${sentinelPorts[i]}`).join(' '),
    SELF: String(self),
    MASTER_NAME: MASTER,
    REDIS_PASSWORD: PASSWORD,
    DATA_DIR: join(dir, `data-${self}`),
    CONF_DIR: join(dir, `${role}-${self}`),
    BIND: '127.0.0.1',
    // Quicker than the chart's 5 s, not so quick that a loaded machine's pause looks like a death.
    DOWN_AFTER_MS: '3000',
    FAILOVER_TIMEOUT_MS: '10000',
  });
  const start = (role: 'redis' | 'sentinel', self: number): Child =>
    spawnChild(`redis-node.sh ${role} ${self}`, 'sh', [SCRIPT, role], { env: nodeEnv(role, self) });

  beforeAll(async () => {
    const bins = new Set([dirname(requireTool(REDIS_SERVER)), dirname(requireTool(REDIS_CLI))]);
    path = [...bins, process.env.PATH ?? ''].join(':');
    for (let i = 0; i < NODES; i++) {
      redisPorts.push(await freePort());
      sentinelPorts.push(await freePort());
      await execFileAsync('mkdir', ['-p', join(dir, `data-${i}`)]);
    }
    for (let i = 0; i < NODES; i++) redis.set(i, start('redis', i));
    for (let i = 0; i < NODES; i++) sentinels.push(start('sentinel', i));
  }, 60_000);

  afterAll(async () => {
    if (client) await closeRedis(client);
    await Promise.allSettled([...redis.values(), ...sentinels].map((c) => c.kill()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('elects the first node, replicates to the others, fails over on a SIGKILL and takes the old primary back as a replica', async () => {
    // First start: no sentinel answers yet, so the first node is the primary and the others its replicas.
    await until(
      'every sentinel sees the first node as primary with 2 replicas and 2 other sentinels',
      async () => {
        for (const s of sentinelPorts) {
          if ((await primaryPort(s)) !== redisPorts[0]) return false;
          const replicas = (await cli(s, 'sentinel', 'replicas', MASTER))
            .split('\n')
            .filter((l) => l === 'name');
          const peers = (await cli(s, 'sentinel', 'sentinels', MASTER))
            .split('\n')
            .filter((l) => l === 'name');
          if (replicas.length !== 2 || peers.length !== 2) return false;
        }
        // A sentinel lists a replica as soon as the primary does, while its first sync may still run
        // (WAIT would count none): both must be online.
        const info = await cli(redisPorts[0] as number, 'info', 'replication');
        return (info.match(/state=online/g) ?? []).length === 2;
      },
    );

    // The quota services' client, configured as the chart configures it (REDIS_SENTINELS …).
    const target = redisTargetVar({
      REDIS_SENTINELS: sentinelPorts.map((p) => `127.0.0.1:${p}`).join(','),
      REDIS_SENTINEL_MASTER: MASTER,
      REDIS_SENTINEL_PASSWORD: PASSWORD,
      REDIS_PASSWORD: PASSWORD,
    });
    expect(target?.mode).toBe('sentinel');
    expect(target?.waitReplicas).toBe(1);
    // The services' default timeouts: a handover must fit in them.
    client = connectRedis({
      target: target as NonNullable<typeof target>,
      commandTimeoutMs: SETTINGS.REDIS_COMMAND_TIMEOUT_MS.default,
      socketTimeoutMs: SETTINGS.REDIS_SOCKET_TIMEOUT_MS.default,
      connectTimeoutMs: SETTINGS.REDIS_CONNECT_TIMEOUT_MS.default,
    });
    await redisReady(client, 10_000);
    const acknowledged: string[] = [];
    for (let i = 0; i < 20; i++) {
      await client.set(`account:${i}`, `before-${i}`);
      // The store's durability: a write counts once a replica has it.
      expect(Number(await client.call('WAIT', '1', '1000'))).toBeGreaterThanOrEqual(1);
      acknowledged.push(`account:${i}`);
    }

    const old = redisPorts[0] as number;
    await redis.get(0)?.kill(); // SIGKILL: the primary's pod gone
    const killedAt = Date.now();
    await until(
      'the sentinels promote a replica',
      async () => {
        const ports = await Promise.all(sentinelPorts.map(primaryPort));
        return ports.every((p) => p !== old && p === ports[0]);
      },
      60_000,
    );
    const failoverMs = Date.now() - killedAt;
    const promoted = await primaryPort(sentinelPorts[0] as number);
    expect((await cli(promoted, 'role')).split('\n')[0]).toBe('master');

    // Nothing acknowledged was lost, and the quota services' client writes to the new primary.
    await until('the client follows the new primary', async () => {
      await client?.set('after-failover', '1');
      return true;
    });
    for (const key of acknowledged) expect(await client.get(key)).toBe(`before-${key.split(':')[1]}`);

    // The old primary's pod restarts: the script asks the sentinels and joins as a replica at once.
    redis.set(0, start('redis', 0));
    await until('the old primary is a replica of the new one, in sync', async () => {
      const role = (await cli(old, 'role')).split('\n');
      return role[0] === 'slave' && Number(role[2]) === promoted && role[3] === 'connected';
    });
    expect(redis.get(0)?.output()).toContain(`replica of 127.0.0.1:${promoted}`);
    expect(await cli(old, 'get', 'after-failover')).toBe('1');

    // The primary's pod deleted gracefully (or its node drained): its preStop hook hands over, while the
    // quota services' client keeps writing, by script as their counters do.
    const handing = redisPorts.indexOf(promoted);
    const written: string[] = [];
    let writing = true;
    const refused: string[] = [];
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        try {
          await SET_BY_SCRIPT.run(client as RedisClient, [`during:${i}`], ['1']);
          written.push(`during:${i}`);
        } catch (err) {
          refused.push((err as Error).message);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    const handoverStarted = Date.now();
    const handover = await execFileAsync('sh', [SCRIPT, 'handover'], { env: nodeEnv('redis', handing) });
    const handoverMs = Date.now() - handoverStarted;
    await until(
      'the client writes to the new primary',
      async () => written.length > 0 && (await client?.set('after-handover', '1')) === 'OK',
    );
    writing = false;
    await writer;
    const successor = await primaryPort(sentinelPorts[1] as number);
    expect(handover.stdout).toContain(`handed over to 127.0.0.1:${successor}`);
    expect(successor).not.toBe(promoted);
    expect((await cli(promoted, 'role')).split('\n')[0]).toBe('slave');
    expect((await cli(successor, 'role')).split('\n')[0]).toBe('master');
    // Every write acknowledged before, during and after the handover is on the new primary.
    const missing = [];
    for (const key of [...acknowledged, ...written])
      if ((await cli(successor, 'exists', key)) !== '1') missing.push(key);
    expect(missing).toEqual([]);
    // The handing-over primary refused scripts (NOREPLICAS, then READONLY: not run); each ran again,
    // on the new primary in the end: none failed, with the services' default timeouts.
    const refusals = Number(
      /errorstat_NOREPLICAS:count=(\d+)/.exec(await cli(promoted, 'info', 'errorstats'))?.[1] ?? 0,
    );
    expect(refusals).toBeGreaterThan(0);
    expect(refused).toEqual([]);
    // A replica's preStop does nothing.
    const replica = redisPorts.indexOf(promoted);
    const quiet = await execFileAsync('sh', [SCRIPT, 'handover'], { env: nodeEnv('redis', replica) });
    expect(quiet.stdout).toBe('');
    expect(await primaryPort(sentinelPorts[2] as number)).toBe(successor);
    console.log(
      `sentinel handover (preStop): the primary handed over in ${(handoverMs / 1000).toFixed(1)} s; ${written.length} script writes acknowledged meanwhile, all on the new primary, none failed (the old primary refused ${refusals} tries with NOREPLICAS; each script ran again until the new primary took it)`,
    );
    console.log(
      `sentinel failover: primary SIGKILLed, replica promoted after ${(failoverMs / 1000).toFixed(1)} s ` +
        `(down-after 3 s); ${acknowledged.length}/${acknowledged.length} acknowledged writes kept; old primary back as a replica`,
    );
  }, 180_000);

  it('takes a primary a sentinel names by DNS (a release before 0.4.0 being upgraded) as the node of that ordinal', async () => {
    // A sentinel of such a release: it names the primary <prefix>-redis-1.<headless Service>…, which
    // this release's sentinels (resolving no name) refused at boot.
    const named = 'nsfwdetector-redis-1.nsfwdetector-redis-nodes.nsfwdetector.svc';
    const fake = createServer((socket) => {
      let buffered = '';
      socket.on('data', (data) => {
        buffered += data.toString('latin1');
        // Each RESP array a command: *N, then N bulk strings ($len, the bytes).
        for (;;) {
          const command = /^\*(\d+)\r\n((?:\$\d+\r\n[^\r]*\r\n)*)/.exec(buffered);
          if (!command) return;
          const words = [...(command[2] ?? '').matchAll(/\$\d+\r\n([^\r]*)\r\n/g)].map((m) => m[1]);
          if (words.length < Number(command[1])) return;
          buffered = buffered.slice(command[0].length);
          const answer =
            words[0]?.toLowerCase() === 'sentinel'
              ? `*2\r\n$${named.length}\r\n${named}\r\n$4\r\n6379\r\n`
              : '+OK\r\n';
          socket.write(answer);
        }
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const fakePort = (fake.address() as { port: number }).port;
    // redis-server replaced by a stub that prints its configuration: the script's choice is that file.
    const stubs = join(dir, 'stub-bin');
    mkdirSync(stubs, { recursive: true });
    writeFileSync(join(stubs, 'redis-server'), '#!/bin/sh\ncat "$1"\n');
    chmodSync(join(stubs, 'redis-server'), 0o755);
    try {
      const env = {
        ...nodeEnv('redis', 2),
        PATH: `${stubs}:${path}`,
        NODES: `127.0.0.1:7000:${fakePort} 127.0.0.2:7001:1 127.0.0.3:7002:1`,
        CONF_DIR: join(dir, 'named-primary'),
      };
      const { stdout } = await execFileAsync('sh', [SCRIPT, 'redis'], { env });
      expect(stdout).toContain('redis-node: replica of 127.0.0.2:7001');
      expect(readFileSync(join(dir, 'named-primary', 'redis.conf'), 'utf8')).toMatch(
        /^replicaof 127\.0\.0\.2 7001$/m,
      );
    } finally {
      await new Promise((resolve) => fake.close(resolve));
    }
  });

  it('refuses a NODES entry that is not an IP address (a name, or a $(VAR) the kubelet left as it was)', async () => {
    for (const host of ['redis-0.redis-nodes.default.svc', '$(NSFWDETECTOR_REDIS_0_SERVICE_HOST)']) {
      const env = { ...nodeEnv('sentinel', 0), NODES: `${host}:6379:26379 127.0.0.1:6380:26380` };
      const run = execFileAsync('sh', [SCRIPT, 'sentinel'], { env });
      await expect(run).rejects.toMatchObject({ code: 1 });
      const { stderr } = (await run.catch((e: { stderr: string }) => e)) as { stderr: string };
      expect(stderr).toContain(`NODES must hold IP addresses, got "${host}"`);
    }
  });
});
