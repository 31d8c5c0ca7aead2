// The detect endpoints' route schemas (spec 4.1, 4.2, part 7): what the OpenAPI document publishes
// and what Fastify serializes responses with. The body is a stream read by intake, which checks it as
// it arrives (4001 framing, 4002 format, 4003 size, 4005 content); a JSON schema cannot validate a
// stream, so these body and header schemas describe and the route's `validatorCompiler`
// (lib/common/describe-only.ts) accepts — every rule they state is enforced by intake and authorize, in the error envelope.

import { errorResponse } from '../../lib/common/error-schemas.ts';
import { detectionResponseSchema } from './result.ts';

/** The raw-body media types (way B); each must match the image's content. */
export const RAW_IMAGE_TYPES = [
  'image/jpeg',
  'image/png',
  'image/webp',
  'image/bmp',
  'image/tiff',
  'image/gif',
];

const binary = { type: 'string', format: 'binary', contentMediaType: 'application/octet-stream' } as const;

const body = {
  required: true,
  content: {
    'multipart/form-data': {
      schema: {
        type: 'object',
        required: ['file'],
        properties: { file: { ...binary, description: 'The image: exactly one file part named `file`.' } },
      },
    },
    ...Object.fromEntries(
      RAW_IMAGE_TYPES.map((type) => [type, { schema: { ...binary, description: 'The image itself.' } }]),
    ),
  },
} as const;

const deviceId = {
  type: 'string',
  description:
    'Optional UUID (v4) for per-device abuse tracking. An invalid value is ignored, never rejected.',
} as const;

const authorization = {
  type: 'string',
  description:
    'Bearer <API_KEY>: the prefix `nsk_live_` and 32 hexadecimal characters. A missing, malformed, revoked or unknown key is 401/4011.',
} as const;

const rateLimitHeaders = {
  'x-ratelimit-limit': { type: 'string', description: 'Daily limit (integer).' },
  'x-ratelimit-remaining': { type: 'string', description: 'Requests left today (integer).' },
  'x-ratelimit-reset': { type: 'string', description: 'Unix time in seconds of the next UTC midnight.' },
  'x-quota-tier': { type: 'string', description: '`anonymous`, `free` or `pro`.' },
} as const;

const success = {
  description: 'The image was scored.',
  headers: rateLimitHeaders,
  ...detectionResponseSchema,
  examples: [
    {
      code: 0,
      message: 'ok',
      data: {
        decision: 'allow',
        scores: { nsfw: 0.0213, sfw: 0.9787 },
        thresholds: { allow: 0.1, block: 0.9 },
        image: {
          sha256: '9f2c1e7a5b3d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d6e7f',
          format: 'jpeg',
          width: 1024,
          height: 768,
          bytes: 183422,
          frames: 1,
          pdq: '98c43ce61e306d93396433cecc33666cf1b6333164cb4ee64b86cbb33e109e6c',
          pdq_quality: 100,
        },
        matches: [],
        timing_ms: 38.4,
      },
    },
  ],
};

const common = {
  tags: ['detect'],
  body,
} as const;

export const publicDetectSchema = {
  ...common,
  summary: 'Score an image, anonymously (spec 4.1)',
  description: `Quota per client IP. Send the image either as a multipart form with one file part \`file\`, or as the raw body with its \`image/*\` type:

\`\`\`
curl -F file=@photo.jpg https://HOST/api/public/detect
curl -H 'Content-Type: image/jpeg' --data-binary @photo.jpg https://HOST/api/public/detect
\`\`\``,
  headers: { type: 'object', properties: { 'x-device-id': deviceId } },
  response: {
    200: success,
    400: errorResponse(400),
    429: errorResponse(429, { headers: rateLimitHeaders }),
    503: errorResponse(503),
  },
} as const;

export const openDetectSchema = {
  ...common,
  summary: 'Score an image, with an API key (spec 4.2)',
  description: `Quota per account (all keys of an account share it). Same request ways and result as the anonymous endpoint:

\`\`\`
curl -H 'Authorization: Bearer nsk_live_0123456789abcdef0123456789abcdef' -F file=@photo.jpg https://HOST/api/open/detect
\`\`\``,
  security: [{ apiKey: [] }],
  headers: { type: 'object', properties: { authorization, 'x-device-id': deviceId } },
  response: {
    200: success,
    400: errorResponse(400),
    401: errorResponse(401),
    429: errorResponse(429, { headers: rateLimitHeaders }),
    503: errorResponse(503),
  },
} as const;
