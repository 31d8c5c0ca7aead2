// The health service: spec 4.3. It answers from constants only — never the model, never a store —
// so it stays up and unlimited whatever else is failing.

import type { FastifyInstance } from 'fastify';
import { ok, okSchema } from '../common/envelope.ts';
import skillRoutes from './skill/skill-routes.ts';
import { SKILL_VERSION } from './skill/skill-version.ts';
import { SERVICE_NAME, SERVICE_VERSION } from './versions.ts';

const healthResponseSchema = okSchema({
  type: 'object',
  required: ['status', 'service', 'version', 'skill_version'],
  properties: {
    status: { type: 'string' },
    service: { type: 'string' },
    version: { type: 'string' },
    skill_version: { type: 'string' },
  },
});

export default async function healthApp(app: FastifyInstance): Promise<void> {
  const body = ok({
    status: 'ok',
    service: SERVICE_NAME,
    version: SERVICE_VERSION,
    skill_version: SKILL_VERSION,
  });
  app.get('/api/public/health', { schema: { response: { 200: healthResponseSchema } } }, async () => body);
  await app.register(skillRoutes);
}
