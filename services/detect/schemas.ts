// The detect endpoints' route schemas (spec 4.1, 4.2, part 7): what the OpenAPI document publishes
// and what Fastify serializes responses with. The body is a stream read by intake, which checks it as
// it arrives (4001 framing, 4002 format, 4003 size, 4005 content); a JSON schema cannot validate a
// stream, so these body and header schemas describe and the route's `validatorCompiler`
// (lib/common/describe-only.ts) accepts — every rule they state is enforced by intake and authorize, in the error envelope.

import { errorResponse } from '../../lib/common/error-schemas.ts';
import { FORMATS, IMAGE_FORMATS } from '../../lib/common/image-formats.ts';
import { detectionResponseSchema } from './result.ts';

/** The raw-body media types (way B); each must match the image's content. */
export const RAW_IMAGE_TYPES = IMAGE_FORMATS.map((f) => FORMATS[f].mime);

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
  'x-ratelimit-limit': { type: 'integer', description: 'Daily limit of the caller.', example: 100 },
  'x-ratelimit-remaining': { type: 'integer', description: 'Requests left today.', example: 99 },
  'x-ratelimit-reset': {
    type: 'integer',
    description: 'Unix time in seconds of the next UTC midnight, when the day resets.',
    example: 1931299200,
  },
  'x-quota-tier': {
    type: 'string',
    enum: ['anonymous', 'free', 'pro'],
    description: 'Whose quota counted the request.',
  },
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
          frames_scored: 1,
          decisive_frame: 0,
        },
        matches: [],
        timing_ms: 38.4,
        model: 'mobilenet_v2',
        classes: { drawing: 0.0142, hentai: 0.0031, neutral: 0.9645, porn: 0.0098, sexy: 0.0084 },
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
  summary: 'Score an image, anonymously',
  description: `Quota per client IP: 10 requests a minute and 30 a day by default (an API key has its own, higher limit). Send the image either as a multipart form with one file part \`file\`, or as the raw body with its \`image/*\` type:

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
  summary: 'Score an image, with an API key',
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
