// The quota service's part of the configuration (and the admin CLI's, which opens the same stores):
// where accounts live without Redis, and the quota server's port.

import type { NetworkPrefixes } from '../../lib/common/client-key.ts';
import {
  type CoreConfig,
  type Env,
  intSetting,
  loadCoreConfig,
  pathSetting,
} from '../../lib/common/config.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';
import type { WindowLimits } from '../../lib/policy/rules.ts';
import type { SourceLimits } from './source-limit.ts';

/** What openStores needs: the Redis (core) or, without one, the embedded accounts file. */
export interface StoresConfig extends Pick<CoreConfig, 'redisTarget' | 'redis'>, Partial<KeyUseConfig> {
  /** Embedded account store (no Redis): absolute path of the JSON file. Unset: Redis is required. */
  accountsFile?: string;
}

/** How often a key's last use is written (KEY_LAST_USED_INTERVAL_MS); default TOUCH_INTERVAL_MS. */
export interface KeyUseConfig {
  keyLastUsedIntervalMs: number;
}

export function loadKeyUseConfig(env: Env): KeyUseConfig {
  return { keyLastUsedIntervalMs: intSetting(env, 'KEY_LAST_USED_INTERVAL_MS') };
}

/** The console's bound on sign-ups from all addresses together (a flood from many is bounded too). */
export interface SignupConfig {
  signupTotal: WindowLimits;
  /** The most of signupTotal one network may take (SIGNUP_NETWORK_SHARE_PERCENT). */
  signupNetworkSharePercent: number;
  /** What one network is (NETWORK_IPV4_PREFIX_LENGTH, NETWORK_IPV6_PREFIX_LENGTH). */
  networkPrefixes: NetworkPrefixes;
}

export interface QuotaConfig extends CoreConfig, PolicyConfig, SignupConfig, KeyUseConfig {
  accountsFile: string;
  /** Port of the quota service's own server (ext_authz + console), when run on its own. */
  quotaPort: number;
  /** Its Envoy's rate-limit service (per-source new connections): the port, 0 = not served. */
  sourceLimitPort: number;
  sourceLimits: SourceLimits;
}

export function accountsFileVar(env: Env): string {
  return pathSetting(env, 'ACCOUNTS_FILE');
}

export function loadSignupConfig(env: Env): SignupConfig {
  return {
    signupTotal: {
      perMinute: intSetting(env, 'SIGNUP_PER_MINUTE'),
      perDay: intSetting(env, 'SIGNUP_PER_DAY'),
    },
    signupNetworkSharePercent: intSetting(env, 'SIGNUP_NETWORK_SHARE_PERCENT'),
    networkPrefixes: {
      ipv4: intSetting(env, 'NETWORK_IPV4_PREFIX_LENGTH'),
      ipv6: intSetting(env, 'NETWORK_IPV6_PREFIX_LENGTH'),
    },
  };
}

export function loadQuotaConfig(env: Env): QuotaConfig {
  return {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    ...loadSignupConfig(env),
    ...loadKeyUseConfig(env),
    accountsFile: accountsFileVar(env),
    quotaPort: intSetting(env, 'QUOTA_PORT'),
    sourceLimitPort: intSetting(env, 'SOURCE_LIMIT_PORT'),
    sourceLimits: {
      perSecond: intSetting(env, 'SOURCE_CONNECTIONS_PER_SECOND'),
      burst: intSetting(env, 'SOURCE_CONNECTIONS_BURST'),
    },
  };
}
