// The public document for a process that serves only part of the public routes (cluster mode: the
// health service publishes /openapi.json while detect's routes live in the detect service). It is built
// from the very plugins and schemas the services register, on an instance that never listens and is
// closed at once, so the cluster publishes the same document as `npm start`.

import type { CoreConfig } from '../../lib/common/config.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import { registerOpenApi } from '../../lib/openapi/app.ts';
import type { PolicyConfig } from '../../lib/policy/policy-config.ts';
import detectApp from '../detect/app.ts';
import type { UploadConfig } from '../detect/config.ts';
import { EdgeAuthorizer } from '../detect/edge-identity.ts';
import { intakeLimitsFrom } from '../detect/intake.ts';
import { ScorerSlot } from '../detect/scoring/scorer-slot.ts';
import { WorkGate } from '../detect/work-gate.ts';
import healthApp from './app.ts';

export async function buildPublicDocument(config: CoreConfig & PolicyConfig & UploadConfig): Promise<object> {
  const app = createRootApp({ config, logger: false });
  try {
    await registerOpenApi(app);
    await app.register(healthApp);
    await app.register(detectApp, {
      model: new ScorerSlot(),
      authorizer: new EdgeAuthorizer(),
      gate: new WorkGate(config.concurrency),
      thresholds: config.thresholds,
      intake: intakeLimitsFrom(config),
      limits: config.limits,
    });
    await app.ready();
    return app.swagger();
  } finally {
    await app.close();
  }
}
