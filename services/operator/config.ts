// The operator's configuration: the core (Redis, required: it writes accounts and keys there) and the
// OPERATOR_* variables.

import { hostname } from 'node:os';
import {
  ConfigError,
  type CoreConfig,
  type Env,
  intSetting,
  loadCoreConfig,
  optionalStringSetting,
  stringSetting,
  stringVar,
} from '../../lib/common/config.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { type PolicyReader, parsePolicyReaders } from './policy-readers.ts';

export interface OperatorConfig extends CoreConfig {
  namespace: string;
  identity: string;
  leaseSeconds: number;
  retryMs: number;
  resyncMs: number;
  metricsPort: number;
  detectDeployment: string | undefined;
  /** Services whose ready pods must report a policy generation before it is Ready (OPERATOR_POLICY_READERS). */
  policyReaders: PolicyReader[];
  /** Services whose ready pods must hold a HashList before it is Ready (OPERATOR_HASH_LIST_READERS). */
  hashListReaders: PolicyReader[];
}

export function loadOperatorConfig(env: Env): OperatorConfig {
  const core = loadCoreConfig(env);
  if (!core.redisTarget)
    throw new ConfigError(
      'REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES is required: the operator writes accounts and keys to Redis',
    );
  const config: OperatorConfig = {
    ...core,
    namespace: stringSetting(env, 'OPERATOR_NAMESPACE'),
    identity: stringVar(env, 'OPERATOR_IDENTITY', `${hostname()}-${process.pid}`),
    leaseSeconds: intSetting(env, 'OPERATOR_LEASE_SECONDS'),
    retryMs: intSetting(env, 'OPERATOR_RETRY_MS'),
    resyncMs: intSetting(env, 'OPERATOR_RESYNC_MS'),
    metricsPort: intSetting(env, 'OPERATOR_METRICS_PORT'),
    detectDeployment: optionalStringSetting(env, 'OPERATOR_DETECT_DEPLOYMENT'),
    policyReaders: policyReadersVar(env),
    hashListReaders: readersVar(env, 'OPERATOR_HASH_LIST_READERS'),
  };
  if (config.retryMs * 3 >= config.leaseSeconds * 1000 * 2)
    throw new ConfigError(
      'OPERATOR_RETRY_MS must be below two thirds of OPERATOR_LEASE_SECONDS (the renew deadline): a leader renews several times before it steps down',
    );
  const name = config.detectDeployment;
  if (name !== undefined && !new RegExp(SETTINGS.OPERATOR_DETECT_DEPLOYMENT.pattern).test(name))
    throw new ConfigError(
      `OPERATOR_DETECT_DEPLOYMENT must be a Deployment name, got ${JSON.stringify(name)}`,
    );
  return config;
}

function readersVar(env: Env, name: 'OPERATOR_HASH_LIST_READERS'): PolicyReader[] {
  try {
    return parsePolicyReaders(env[name]);
  } catch (err) {
    throw new ConfigError(`${name}: ${(err as Error).message}`);
  }
}

function policyReadersVar(env: Env): PolicyReader[] {
  try {
    return parsePolicyReaders(env.OPERATOR_POLICY_READERS);
  } catch (err) {
    throw new ConfigError(`OPERATOR_POLICY_READERS: ${(err as Error).message}`);
  }
}
