// `describe` for suites that need the real Kubernetes API server (kube-apiserver, etcd, kubectl) and
// Helm. Missing tool: fails under CI=true, skipped elsewhere with one line naming the install command.

import { describe, it } from 'vitest';
import { missingTools } from '../../services/stack/tools.ts';
import { type KubeTool, missingKubeTools } from './kube-apiserver.ts';

export function describeWithKube(name: string, tools: readonly KubeTool[], body: () => void): void {
  const missing = [missingKubeTools(tools), missingTools(['helm'])].filter(Boolean).join('; ');
  if (!missing) {
    describe(name, body);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it('needs its tools', () => {
        throw new Error(`${missing}; CI=true requires this suite`);
      });
    });
    return;
  }
  console.warn(`[skipped] ${name}: ${missing}`);
  describe.skip(name, body);
}
