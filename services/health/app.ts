// The health service: spec 4.3. It answers from constants only — never the model, never a store —
// so it stays up and unlimited whatever else is failing.

import type { FastifyInstance } from 'fastify';
import { ok } from '../../lib/common/envelope.ts';
import { SERVICE_NAME, SERVICE_VERSION } from '../../lib/common/versions.ts';
import { healthSchema } from './schemas.ts';
import skillRoutes from './skill/skill-routes.ts';
import { SKILL_VERSION } from './skill/skill-version.ts';

export default async function healthApp(app: FastifyInstance): Promise<void> {
  const body = ok({
    status: 'ok',
    service: SERVICE_NAME,
    version: SERVICE_VERSION,
    skill_version: SKILL_VERSION,
  });
  app.get('/api/public/health', { schema: healthSchema }, async () => body);
  await app.register(skillRoutes);
}
