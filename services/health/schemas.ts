// The health service's route schemas (spec 2.3, 4.3): published in the OpenAPI document and used to
// serialize the answers.

import { okSchema } from '../../lib/common/envelope.ts';
import { errorResponse } from '../../lib/common/error-schemas.ts';
import { SERVICE_NAME, SERVICE_VERSION } from '../../lib/common/versions.ts';
import { SKILL_VERSION } from './skill/skill-version.ts';

export const healthResponseSchema = okSchema({
  type: 'object',
  required: ['status', 'service', 'version', 'skill_version'],
  properties: {
    status: { type: 'string', enum: ['ok'], description: '"ok" while the process is up.' },
    service: { type: 'string', description: 'The service identity name.' },
    version: { type: 'string', description: 'The service version.' },
    skill_version: {
      type: 'string',
      description: 'Version of the companion command-line client (/skill/nsfwdetector.py).',
    },
  },
});

export const healthSchema = {
  tags: ['health'],
  summary: 'Service identity and liveness',
  description:
    'Answers from constants: never probes the model or a store, never rate limited. ' +
    'Not the readiness signal: a fresh process answers ok here before detect can score.',
  response: {
    200: {
      description: 'The service is up.',
      ...healthResponseSchema,
      examples: [
        {
          code: 0,
          message: 'ok',
          data: {
            status: 'ok',
            service: SERVICE_NAME,
            version: SERVICE_VERSION,
            skill_version: SKILL_VERSION,
          },
        },
      ],
    },
  },
} as const;

/** The companion client's documents (spec part 1), served with the request's base URL substituted. */
export function documentSchema(summary: string, mediaType: string) {
  return {
    tags: ['skill'],
    summary,
    response: {
      200: { description: summary, content: { [mediaType]: { schema: { type: 'string' } } } },
      400: { ...errorResponse(400), description: '4001: the Host header is not a plain host[:port].' },
    },
  } as const;
}
