import { describe, expect, it } from 'vitest';
import { ConfigError, loadCoreConfig } from './config.ts';

const target = (env: Record<string, string>) => loadCoreConfig(env).redisTarget;

describe('Redis topology configuration', () => {
  it('reads a single URL, Sentinel or Cluster, with credentials and WAIT defaults per topology', () => {
    expect(target({})).toBeUndefined();
    expect(target({ REDIS_URL: 'redis://:pw@r:6379/0' })).toEqual({
      mode: 'single',
      url: 'redis://:pw@r:6379/0',
      waitReplicas: 0,
    });
    expect(
      target({
        REDIS_SENTINELS: 's1:26379, s2 ,[::1]:26380,[10.96.0.7]:26381',
        REDIS_SENTINEL_MASTER: 'mymaster',
        REDIS_SENTINEL_PASSWORD: 'sp',
        REDIS_PASSWORD: 'dp',
      }),
    ).toEqual({
      mode: 'sentinel',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26379 },
        { host: '::1', port: 26380 },
        { host: '10.96.0.7', port: 26381 },
      ],
      masterName: 'mymaster',
      sentinelPassword: 'sp',
      password: 'dp',
      waitReplicas: 1,
    });
    expect(
      target({ REDIS_CLUSTER_NODES: 'a:7000,b:7001', REDIS_USERNAME: 'u', REDIS_WAIT_REPLICAS: '0' }),
    ).toEqual({
      mode: 'cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
      ],
      username: 'u',
      waitReplicas: 0,
    });
  });

  it.each([
    [
      { REDIS_URL: 'redis://a', REDIS_CLUSTER_NODES: 'b:1' },
      /only one of .*REDIS_URL and REDIS_CLUSTER_NODES/,
    ],
    [{ REDIS_SENTINELS: 'a:1', REDIS_CLUSTER_NODES: 'b:1' }, /only one of/],
    [{ REDIS_SENTINELS: 'a:1' }, /needs REDIS_SENTINEL_MASTER/],
    [{ REDIS_SENTINEL_MASTER: 'm' }, /only used with REDIS_SENTINELS/],
    [{ REDIS_URL: 'redis://a', REDIS_SENTINEL_PASSWORD: 'x' }, /only used with REDIS_SENTINELS/],
    [{ REDIS_CLUSTER_NODES: 'a:1,,b:2' }, /host:port/],
    [{ REDIS_CLUSTER_NODES: 'a:70000' }, /host:port/],
    [{ REDIS_CLUSTER_NODES: 'redis://a:1' }, /host:port/],
    [{ REDIS_CLUSTER_NODES: 'a:1,a:1' }, /names a:1 twice/],
    [
      { REDIS_SENTINELS: '[$(NSFWDETECTOR_REDIS_0_SERVICE_HOST)]:26379', REDIS_SENTINEL_MASTER: 'm' },
      /\$\(VAR\) reference left unexpanded/,
    ],
    [{ REDIS_URL: 'http://a' }, /redis:\/\/ or rediss:\/\//],
    [{ REDIS_URL: 'redis://a', REDIS_WAIT_REPLICAS: '-1' }, /REDIS_WAIT_REPLICAS/],
  ])('refuses %j at boot', (env, message) => {
    expect(() => loadCoreConfig(env)).toThrow(ConfigError);
    expect(() => loadCoreConfig(env)).toThrow(message);
  });
});
