// The operator's configuration: Redis required, its OPERATOR_* rules, and nothing of the detect service.

import { describe, expect, it } from 'vitest';
import { loadOperatorConfig } from './config.ts';

const REDIS = { REDIS_URL: 'redis://127.0.0.1:6379' };

describe('loadOperatorConfig', () => {
  it('needs a Redis: it writes accounts and keys there', () => {
    expect(() => loadOperatorConfig({})).toThrow(
      /REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES is required/,
    );
    expect(loadOperatorConfig(REDIS).namespace).toBe('default');
  });

  it('renews several times within a lease: OPERATOR_RETRY_MS below two thirds of the lease', () => {
    expect(
      loadOperatorConfig({ ...REDIS, OPERATOR_LEASE_SECONDS: '15', OPERATOR_RETRY_MS: '9999' }).retryMs,
    ).toBe(9999);
    expect(() =>
      loadOperatorConfig({ ...REDIS, OPERATOR_LEASE_SECONDS: '15', OPERATOR_RETRY_MS: '10000' }),
    ).toThrow(/OPERATOR_RETRY_MS must be below two thirds of OPERATOR_LEASE_SECONDS/);
  });

  it('takes a Deployment name for OPERATOR_DETECT_DEPLOYMENT', () => {
    expect(
      loadOperatorConfig({ ...REDIS, OPERATOR_DETECT_DEPLOYMENT: 'nsfwdetector-detect' }).detectDeployment,
    ).toBe('nsfwdetector-detect');
    expect(() => loadOperatorConfig({ ...REDIS, OPERATOR_DETECT_DEPLOYMENT: 'Not_A_Name' })).toThrow(
      /OPERATOR_DETECT_DEPLOYMENT must be a Deployment name/,
    );
  });

  it('reads nothing of the detect service', () => {
    expect(() => loadOperatorConfig({ ...REDIS, MODEL: 'resnet', JPEG_DECODER: 'gif' })).not.toThrow();
  });
});
