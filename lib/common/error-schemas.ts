// JSON schemas of the error envelope (spec 2.1, part 7), built from the one table of errors so the
// published document can never list a code the service does not send, or miss one it does.

import { ERRORS } from './errors.ts';

type Status = (typeof ERRORS)[keyof typeof ERRORS]['status'];

/** The codes of the table that answer with `status`, in table order. */
export function codesFor(status: Status): number[] {
  return Object.values(ERRORS)
    .filter((entry) => entry.status === status)
    .map((entry) => entry.code);
}

/** `{code, message}` restricted to the codes of `status`. */
export function errorBodySchema(status: Status) {
  return {
    type: 'object' as const,
    required: ['code', 'message'],
    additionalProperties: false,
    properties: {
      code: {
        type: 'integer' as const,
        enum: codesFor(status),
        description: 'The specific reason (the HTTP status is the class).',
      },
      message: { type: 'string' as const, description: 'A short text for people; do not parse it.' },
    },
  };
}

const describe = (status: Status) =>
  Object.values(ERRORS)
    .filter((entry) => entry.status === status)
    .map((entry) => `${entry.code}: ${entry.message}`)
    .join('; ');

const RETRY_AFTER = {
  'retry-after': {
    type: 'integer',
    description: 'Seconds to wait before retrying. Present on every 429; on 503 when known.',
    example: 30,
  },
} as const;

/**
 * One named example per code of `status`: the envelope as sent, with the table's default message.
 * `x-examples` is @fastify/swagger's key for a media type's named `examples` (OpenAPI 3).
 */
export function errorExamples(status: Status) {
  return Object.fromEntries(
    Object.values(ERRORS)
      .filter((entry) => entry.status === status)
      .map((entry) => [
        String(entry.code),
        { summary: `${entry.code}: ${entry.message}`, value: { code: entry.code, message: entry.message } },
      ]),
  );
}

/** A response schema (for `schema.response[status]`) of the error envelope with its codes and headers. */
export function errorResponse(status: Status, extra: { headers?: Record<string, object> } = {}) {
  const headers: Record<string, object> = { ...extra.headers };
  if (status === 429 || status === 503) Object.assign(headers, RETRY_AFTER);
  return {
    description: describe(status),
    ...(Object.keys(headers).length > 0 ? { headers } : {}),
    ...errorBodySchema(status),
    'x-examples': errorExamples(status),
  };
}
