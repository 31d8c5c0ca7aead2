// `npm start`'s configuration: one process serves everything, so it reads every part but the
// cluster-only ones (the servers' own ports, EDGE_SECRET, the operator's).

import { type CoreConfig, type Env, intSetting, loadCoreConfig } from '../../lib/common/config.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';
import {
  loadScoringConfig,
  loadUploadConfig,
  type ScoringConfig,
  type UploadConfig,
} from '../detect/config.ts';
import {
  accountsFileVar,
  type KeyUseConfig,
  loadKeyUseConfig,
  loadSignupConfig,
  type SignupConfig,
} from '../quota/config.ts';

export interface AllInOneConfig
  extends CoreConfig,
    PolicyConfig,
    UploadConfig,
    ScoringConfig,
    SignupConfig,
    KeyUseConfig {
  port: number;
  accountsFile: string;
}

export function loadAllInOneConfig(env: Env): AllInOneConfig {
  return {
    ...loadCoreConfig(env),
    ...loadPolicyConfig(env),
    ...loadUploadConfig(env),
    ...loadScoringConfig(env),
    ...loadSignupConfig(env),
    ...loadKeyUseConfig(env),
    port: intSetting(env, 'PORT'),
    accountsFile: accountsFileVar(env),
  };
}
