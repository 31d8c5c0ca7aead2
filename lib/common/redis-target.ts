// Which Redis the stores use, read from the environment: exactly one of three topologies.
//   single    REDIS_URL=redis://[:password@]host:port[/db]
//   Sentinel  REDIS_SENTINELS=host:port,host:port,…  REDIS_SENTINEL_MASTER=<name>
//   Cluster   REDIS_CLUSTER_NODES=host:port,…  (seed nodes; the rest is discovered by the client)
// Credentials: REDIS_USERNAME / REDIS_PASSWORD for the data nodes (single: a password in the URL wins),
// REDIS_SENTINEL_PASSWORD for the sentinels. REDIS_WAIT_REPLICAS: how many replicas must acknowledge
// a write to accounts, keys and tiers (default 1 with Sentinel or Cluster, 0 for a single URL).

import { ConfigError, optionalIntSetting, optionalVar } from './config.ts';

type Env = Record<string, string | undefined>;

export interface RedisNodeAddress {
  host: string;
  port: number;
}

export type RedisTopology =
  | { mode: 'single'; url: string }
  | { mode: 'sentinel'; sentinels: RedisNodeAddress[]; masterName: string; sentinelPassword?: string }
  | { mode: 'cluster'; nodes: RedisNodeAddress[] };

/** Where to connect, with the data nodes' credentials. */
export type RedisEndpoint = RedisTopology & { username?: string; password?: string };

export type RedisTarget = RedisEndpoint & {
  /** Replicas that must acknowledge (WAIT) a write to accounts, keys, tiers and revocations. */
  waitReplicas: number;
};

const DEFAULT_PORT = { sentinel: 26379, cluster: 6379 } as const;

/** The configured Redis, or undefined when none is (embedded stores). */
export function redisTargetVar(env: Env): RedisTarget | undefined {
  const url = optionalVar(env, 'REDIS_URL');
  const sentinels = optionalVar(env, 'REDIS_SENTINELS');
  const master = optionalVar(env, 'REDIS_SENTINEL_MASTER');
  const clusterNodes = optionalVar(env, 'REDIS_CLUSTER_NODES');
  const set = [
    ['REDIS_URL', url],
    ['REDIS_SENTINELS', sentinels],
    ['REDIS_CLUSTER_NODES', clusterNodes],
  ].filter(([, v]) => v !== undefined);
  if (set.length > 1)
    throw new ConfigError(
      `Set only one of REDIS_URL (one Redis), REDIS_SENTINELS (Sentinel) and REDIS_CLUSTER_NODES (Cluster); got ${set.map(([n]) => n).join(' and ')}`,
    );
  if (master !== undefined && sentinels === undefined)
    throw new ConfigError('REDIS_SENTINEL_MASTER is only used with REDIS_SENTINELS');
  const sentinelPassword = optionalVar(env, 'REDIS_SENTINEL_PASSWORD');
  if (sentinelPassword !== undefined && sentinels === undefined)
    throw new ConfigError('REDIS_SENTINEL_PASSWORD is only used with REDIS_SENTINELS');
  const credentials = {
    ...optionalField('username', optionalVar(env, 'REDIS_USERNAME')),
    ...optionalField('password', optionalVar(env, 'REDIS_PASSWORD')),
  };
  const waitReplicas = (fallback: number) => optionalIntSetting(env, 'REDIS_WAIT_REPLICAS') ?? fallback;
  if (url !== undefined)
    return { mode: 'single', url: redisUrl(url), ...credentials, waitReplicas: waitReplicas(0) };
  if (sentinels !== undefined) {
    if (master === undefined)
      throw new ConfigError('REDIS_SENTINELS needs REDIS_SENTINEL_MASTER, the name the sentinels monitor');
    return {
      mode: 'sentinel',
      sentinels: nodeList('REDIS_SENTINELS', sentinels, DEFAULT_PORT.sentinel),
      masterName: master,
      ...optionalField('sentinelPassword', sentinelPassword),
      ...credentials,
      waitReplicas: waitReplicas(1),
    };
  }
  if (clusterNodes !== undefined)
    return {
      mode: 'cluster',
      nodes: nodeList('REDIS_CLUSTER_NODES', clusterNodes, DEFAULT_PORT.cluster),
      ...credentials,
      waitReplicas: waitReplicas(1),
    };
  return undefined;
}

function optionalField<K extends string>(key: K, value: string | undefined): { [P in K]?: string } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: string };
}

function redisUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`REDIS_URL must be a URL like redis://host:6379, got "${raw}"`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:')
    throw new ConfigError(`REDIS_URL must use redis:// or rediss://, got "${url.protocol}"`);
  return raw;
}

/** `host:port,host:port` (IPv6 as `[::1]:port`; the port may be left out). */
function nodeList(name: string, raw: string, defaultPort: number): RedisNodeAddress[] {
  const nodes = raw.split(',').map((part) => {
    const entry = part.trim();
    // The chart writes its in-chart sentinels as $(…_SERVICE_HOST) references, which the kubelet leaves
    // as they are when the Service did not exist as the pod was made; a restart reads them again.
    if (entry.includes('$('))
      throw new ConfigError(
        `${name} holds "${entry}", a Kubernetes $(VAR) reference left unexpanded: the Service it names did not exist when this pod was created (a restart reads it again)`,
      );
    const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s/@]+))(?::(\d{1,5}))?$/.exec(entry);
    const host = m?.[1] ?? m?.[2];
    const port = m?.[3] === undefined ? defaultPort : Number(m[3]);
    if (!host || port < 1 || port > 65535)
      throw new ConfigError(
        `${name} must be a comma-separated list of host:port, got "${entry}" in "${raw}"`,
      );
    return { host, port };
  });
  const seen = new Set<string>();
  for (const n of nodes) {
    const id = `${n.host}:${n.port}`;
    if (seen.has(id)) throw new ConfigError(`${name} names ${id} twice`);
    seen.add(id);
  }
  return nodes;
}
