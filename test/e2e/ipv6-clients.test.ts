// Per-address limits on real IPv6 sockets: the embedded app in a network namespace of its own (nothing
// on the host changes), its loopback holding 60 addresses of fd00:1::/64 and one of fd00:2::/64. The 60
// share one anonymous quota; the other /64 has its own; an IPv4 client, which the dual-stack socket
// sees as ::ffff:a.b.c.d, is counted as its IPv4 address (not all IPv4 clients in one "::/64").

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnChild } from '../support/children.ts';
import { ROOT } from '../support/server-process.ts';
import { describeWithTool, type Tool } from '../support/tools.ts';

const RUNNER = fileURLToPath(new URL('./ipv6-clients.run.ts', import.meta.url));
const ANON_PER_MINUTE = 10;

// unshare -n needs root (or user namespaces) and iproute2 in the namespace: asked, not assumed.
const NETNS: Tool = {
  name: 'unshare -n (root) and ip',
  install: 'run as root, with util-linux and iproute2 (apt-get install util-linux iproute2)',
  find: () =>
    spawnSync('unshare', ['-n', 'ip', 'link', 'set', 'lo', 'up'], { stdio: 'ignore' }).status === 0
      ? 'unshare'
      : undefined,
};

const SETUP = [
  'set -e',
  'ip link set lo up',
  ...Array.from({ length: 60 }, (_, i) => `ip -6 addr add fd00:1::${(i + 1).toString(16)}/128 dev lo nodad`),
  'ip -6 addr add fd00:2::1/128 dev lo nodad',
  `exec "${process.execPath}" --import tsx "${RUNNER}"`,
].join('\n');

describeWithTool([NETNS], 'per-address limits on real IPv6 sockets', () => {
  it('60 addresses of one /64 share one anonymous quota; another /64 and each IPv4 address have their own', async () => {
    const child = spawnChild('ipv6-clients', 'unshare', ['-n', 'sh', '-c', SETUP], {
      cwd: ROOT,
      env: { ...process.env, ANON_PER_MINUTE: String(ANON_PER_MINUTE), LOG_LEVEL: 'silent' },
    });
    const timer = setTimeout(() => void child.kill(), 90_000);
    const code = await child.exited;
    clearTimeout(timer);
    await child.kill();
    const line = child
      .output()
      .split('\n')
      .find((l) => l.startsWith('{"onePrefix"'));
    expect(code, child.output()).toBe(0);
    const result = JSON.parse(line ?? '{}');
    // The runner's quota store is on a set clock: one minute window, whatever the time.
    expect(result.onePrefix).toEqual({ 200: 10, 429: 50 });
    expect(result.otherPrefix).toEqual({ 200: 2 });
    expect(result.ipv4Second).toEqual({ 200: 1 });
    expect(result.ipv4First).toEqual({ 200: 10, 429: 2 });
    // The sockets really were IPv6, and IPv4 peers really arrived mapped.
    expect(result.seen).toEqual(
      expect.arrayContaining(['fd00:1::1', 'fd00:1::3c', 'fd00:2::1', '::ffff:127.0.0.2']),
    );
    expect(result.counted['fd00:1::/64']).toBe(10);
    expect(result.counted['127.0.0.2']).toBe(10);
    expect(result.counted['::ffff:127.0.0.2']).toBe(0);
    expect(result.counted['::/64']).toBe(0);
    expect(result.counted['127.0.0.3']).toBe(1);
    expect(result.counted['fd00:2::/64']).toBe(2);
  }, 120_000);
});
