// The one table of failures (spec part 7). Every refusal the service sends is an ApiError built from
// this table, so the HTTP status, the code and the default message can never drift apart.

import { formatNames } from './image-formats.ts';

export const ERRORS = {
  BAD_REQUEST: { status: 400, code: 4001, message: 'Bad request' },
  UNSUPPORTED_FORMAT: {
    status: 400,
    code: 4002,
    message: `Unsupported format: send ${formatNames()}`,
  },
  FILE_TOO_LARGE: { status: 400, code: 4003, message: 'File too large: the limit is 50 MB (52428800 bytes)' },
  DIMENSIONS_EXCEEDED: { status: 400, code: 4004, message: 'Image dimensions exceed the limits' },
  UNDECODABLE: { status: 400, code: 4005, message: 'Undecodable image' },
  INVALID_API_KEY: { status: 401, code: 4011, message: 'Invalid API key' },
  RATE_LIMITED: { status: 429, code: 4290, message: 'Rate limited: too many requests this minute' },
  DAILY_QUOTA: { status: 429, code: 4291, message: 'Daily quota used' },
  UNAVAILABLE: {
    status: 503,
    code: 5001,
    message: 'Service temporarily unavailable; treat as unknown, not safe',
  },
  // Not in part 7 (which lists detection failures): routing failures keep the same envelope shape.
  NOT_FOUND: { status: 404, code: 4040, message: 'Not found' },
  METHOD_NOT_ALLOWED: { status: 405, code: 4050, message: 'Method not allowed' },
  // Raised by the HTTP layer itself, before any route: they keep their HTTP status, in the envelope.
  REQUEST_TIMEOUT: {
    status: 408,
    code: 4080,
    message: 'Request timeout: the request did not arrive in time',
  },
  HEADERS_TOO_LARGE: { status: 431, code: 4310, message: 'Request header fields too large' },
} as const satisfies Record<string, { status: number; code: number; message: string }>;

export type ErrorName = keyof typeof ERRORS;

export class ApiError extends Error {
  readonly status: number;
  readonly code: number;
  /** Extra response headers, e.g. Retry-After on 429/503. */
  readonly headers: Record<string, string>;

  constructor(name: ErrorName, message?: string, headers: Record<string, string> = {}, cause?: unknown) {
    const entry = ERRORS[name];
    super(message ?? entry.message, cause === undefined ? undefined : { cause });
    this.name = 'ApiError';
    this.status = entry.status;
    this.code = entry.code;
    this.headers = headers;
  }

  body(): { code: number; message: string } {
    return { code: this.code, message: this.message };
  }
}

/**
 * The messages of a detect request refused by its quota (4290, 4291): the limit, when the window
 * resets, and for an anonymous caller that an API key (a free account) has a higher limit. `resetAt`
 * is the refusing window's reset, Unix seconds.
 */
export const QUOTA_REFUSAL_MESSAGES = {
  minute: (limit: number, resetAt: number, anonymous: boolean) =>
    `Rate limited: ${limit} requests per minute; the minute resets at ${isoSeconds(resetAt)}${anonymous ? API_KEY_HINT : ''}`,
  day: (limit: number, resetAt: number, anonymous: boolean) =>
    `Daily quota of ${limit} requests used; it resets at UTC midnight (${isoSeconds(resetAt)})${anonymous ? API_KEY_HINT : ''}`,
} as const;

const API_KEY_HINT =
  '. Anonymous calls are limited per IP address: an API key (a free account, from the console) on /api/open/detect has its own, higher limit';

/** 2031-03-15T00:00:00Z: a Unix time in seconds, as UTC without milliseconds. */
function isoSeconds(unixSeconds: number): string {
  return `${new Date(unixSeconds * 1000).toISOString().slice(0, 19)}Z`;
}

/** The table entry for a numeric code (errors crossing a thread or process boundary travel as codes). */
export function errorNameForCode(code: number): ErrorName | undefined {
  return (Object.keys(ERRORS) as ErrorName[]).find((name) => ERRORS[name].code === code);
}

export function isApiError(err: unknown): err is ApiError {
  return err instanceof ApiError;
}
