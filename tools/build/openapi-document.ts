// The published contract of the whole service (/openapi.json, /docs/api), generated from the routes
// themselves: the very plugins and schemas the services register, on an instance that never listens
// and is closed at once. The build writes it beside the health service (`npm run openapi`; the dist build
// writes it into dist/ too), which serves the file: the cluster publishes the document `npm start` builds
// from its own routes, without building a detect app at run time.
//
// The document does not depend on the configuration (limits and thresholds are applied per request, not
// written into the schemas): the defaults build it.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadCoreConfig } from '../../lib/common/config.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import { registerOpenApi } from '../../lib/openapi/app.ts';
import { loadPolicyConfig } from '../../lib/policy/policy-config.ts';
import detectApp from '../../services/detect/app.ts';
import { loadUploadConfig } from '../../services/detect/config.ts';
import { EdgeAuthorizer } from '../../services/detect/edge-identity.ts';
import { intakeLimitsFrom } from '../../services/detect/intake.ts';
import { ScorerSlot } from '../../services/detect/scoring/scorer-slot.ts';
import { WorkGate } from '../../services/detect/work-gate.ts';
import healthApp from '../../services/health/app.ts';

/** Where the health service reads the document (services/health/public-document.ts). */
export const DOCUMENT_PATH = fileURLToPath(new URL('../../services/health/openapi.json', import.meta.url));

export async function buildPublicDocument(): Promise<object> {
  const config = { ...loadCoreConfig({}), ...loadPolicyConfig({}), ...loadUploadConfig({}) };
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

/** The document as the file holds it. */
export const documentText = (document: object): string => `${JSON.stringify(document, null, 2)}\n`;

/** Whether the file at `path` holds the document the routes produce now. */
export async function documentIsCurrent(path = DOCUMENT_PATH): Promise<boolean> {
  let current: string;
  try {
    current = readFileSync(path, 'utf8');
  } catch {
    return false;
  }
  return current === documentText(await buildPublicDocument());
}
