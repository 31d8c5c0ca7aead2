// The health server's configuration: the core, and what the published contract it serves documents
// (the detect limits and the policy's defaults) — never the model or the JPEG decoder.

import { type CoreConfig, type Env, intSetting, loadCoreConfig } from '../../lib/common/config.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';
import { loadUploadConfig, type UploadConfig } from '../detect/config.ts';

export interface HealthConfig extends CoreConfig, PolicyConfig, UploadConfig {
  healthPort: number;
}

export function loadHealthConfig(env: Env): HealthConfig {
  return {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    ...loadUploadConfig(env),
    healthPort: intSetting(env, 'HEALTH_PORT'),
  };
}
