// The console's JSON API route schemas (spec 5.5): what each route takes and answers, and what Fastify
// serializes its responses with. The routes stay out of the published document (no tags: the console's
// own API, not the product's). The bodies are parsed field by field by the routes (app.ts), which refuse
// bad input with the table's 4001 and a message naming the field; these body schemas describe, and the
// routes' `validatorCompiler` (lib/common/describe-only.ts) accepts.

import { okSchema } from '../../../lib/common/envelope.ts';
import { errorResponse } from '../../../lib/common/error-schemas.ts';

const string = { type: 'string' } as const;
const nullableString = { type: ['string', 'null'] } as const;
const number = { type: 'number' } as const;

const credentials = {
  type: 'object',
  required: ['email', 'password'],
  properties: {
    email: {
      type: 'string',
      description: 'Normalised (NFKC, case-folded, trimmed); at most 254 characters.',
    },
    password: { type: 'string', description: 'At least 10 characters at sign-up, at most 256.' },
  },
} as const;

const sessionView = okSchema({
  type: 'object',
  required: ['account', 'csrfToken'],
  properties: {
    account: {
      type: 'object',
      required: ['id', 'email', 'tier', 'createdAt'],
      properties: { id: string, email: string, tier: string, createdAt: string },
    },
    csrfToken: { type: 'string', description: 'Sent back in X-CSRF-Token on every state-changing request.' },
  },
});

const keyView = {
  type: 'object',
  required: ['id', 'name', 'masked', 'createdAt', 'lastUsedAt', 'revokedAt'],
  properties: {
    id: string,
    name: string,
    masked: string,
    createdAt: string,
    lastUsedAt: nullableString,
    revokedAt: nullableString,
  },
} as const;

const usageWindow = {
  type: 'object',
  required: ['used', 'limit', 'remaining', 'resetAt'],
  properties: { used: number, limit: number, remaining: number, resetAt: number },
} as const;

/** Every console route answers 5001 when a store is down. */
const unavailable = { 503: errorResponse(503) } as const;
/** A logged-in route: 4011 without a session. */
const loggedIn = { 401: errorResponse(401), ...unavailable } as const;
/** A state-changing route: bad input, no session or CSRF proof, a cross-site request. */
const write = { 400: errorResponse(400), ...loggedIn } as const;

export const signupSchema = {
  summary: 'Create an account; answers the same whether the email was free or not, and logs nobody in',
  body: credentials,
  response: {
    202: okSchema({
      type: 'object',
      required: ['email', 'next'],
      properties: { email: string, next: { type: 'string', enum: ['login'] } },
    }),
    ...write,
    429: errorResponse(429),
  },
} as const;

export const loginSchema = {
  summary: 'Log in: sets the session cookie and the known-device cookie',
  body: credentials,
  response: { 200: sessionView, ...write, 429: errorResponse(429) },
} as const;

export const logoutSchema = {
  summary: 'Log out: ends the session',
  response: {
    200: okSchema({
      type: 'object',
      required: ['loggedOut'],
      properties: { loggedOut: { type: 'boolean' } },
    }),
    ...loggedIn,
  },
} as const;

export const sessionSchema = {
  summary: 'The logged-in account and its CSRF token',
  response: { 200: sessionView, ...loggedIn },
} as const;

export const usageSchema = {
  summary: "Today's usage of the account: its day and minute windows",
  response: {
    200: okSchema({
      type: 'object',
      required: ['tier', 'day', 'minute'],
      properties: { tier: string, day: usageWindow, minute: usageWindow },
    }),
    ...loggedIn,
  },
} as const;

export const usageHistorySchema = {
  summary: 'Served and refused requests per UTC day, of the account or (?key=<id>) of one of its keys',
  querystring: {
    type: 'object',
    properties: { key: { type: 'string', description: 'A key id: `key_` + 16 hex.' } },
  },
  response: {
    200: okSchema({
      type: 'object',
      required: ['key', 'dailyLimit', 'days'],
      properties: {
        key: nullableString,
        dailyLimit: number,
        days: {
          type: 'array',
          items: {
            type: 'object',
            required: ['day', 'served', 'refused'],
            properties: { day: string, served: number, refused: number },
          },
        },
      },
    }),
    ...loggedIn,
    404: errorResponse(404),
  },
} as const;

export const listKeysSchema = {
  summary: "The account's API keys, masked",
  response: {
    200: okSchema({
      type: 'object',
      required: ['keys'],
      properties: { keys: { type: 'array', items: keyView } },
    }),
    ...loggedIn,
  },
} as const;

export const createKeySchema = {
  summary: 'Create an API key; its secret is in this answer only',
  body: {
    type: 'object',
    properties: {
      name: {
        type: 'string',
        description:
          'An optional label, at most 64 characters after NFKC normalisation and trimming; control, bidi, ' +
          'zero-width and other invisible characters and unpaired surrogates are refused (4001), as in emails.',
      },
    },
  },
  response: {
    201: okSchema({
      type: 'object',
      required: ['key', 'secret'],
      properties: { key: keyView, secret: string },
    }),
    ...write,
  },
} as const;

export const revokeKeySchema = {
  summary: 'Revoke an API key of the account',
  params: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } },
  response: {
    200: okSchema({ type: 'object', required: ['key'], properties: { key: keyView } }),
    ...write,
  },
} as const;

export const changePasswordSchema = {
  summary:
    "Change the logged-in account's password (the current one is required when it has one); this device stays logged in",
  body: {
    type: 'object',
    required: ['current', 'password'],
    properties: {
      current: { type: 'string', description: 'The current password.' },
      password: { type: 'string', description: 'The new password: at least 10 characters, at most 256.' },
    },
  },
  response: {
    200: okSchema({ type: 'object', required: ['changed'], properties: { changed: { type: 'boolean' } } }),
    ...write,
    429: errorResponse(429),
  },
} as const;
