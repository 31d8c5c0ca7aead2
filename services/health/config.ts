// The health server's configuration: the core, the policy (its root app refuses bodies past
// MAX_FILE_BYTES like every service's) and its port. The published contract it serves is a file generated
// at build time (public-document.ts), so it reads none of detect's own settings.

import { type CoreConfig, type Env, intSetting, loadCoreConfig } from '../../lib/common/config.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';

export interface HealthConfig extends CoreConfig, PolicyConfig {
  healthPort: number;
}

export function loadHealthConfig(env: Env): HealthConfig {
  return {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    healthPort: intSetting(env, 'HEALTH_PORT'),
  };
}
