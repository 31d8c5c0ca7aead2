// The response envelope of spec 2.1 and the hooks that make every failure, including Fastify's own
// and routing misses, leave in that shape. Only 5xx are logged: 4xx are the caller's business.

import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, isApiError } from './errors.ts';

export function ok<T>(data: T): { code: 0; message: 'ok'; data: T } {
  return { code: 0, message: 'ok', data };
}

/** JSON schema of a success envelope around `data` (responses are serialized with it). */
export function okSchema<const T extends object>(data: T) {
  return {
    type: 'object',
    required: ['code', 'message', 'data'],
    properties: { code: { type: 'integer' }, message: { type: 'string' }, data },
  } as const;
}

export function sendError(reply: FastifyReply, err: ApiError): FastifyReply {
  return reply.code(err.status).headers(err.headers).type('application/json; charset=utf-8').send(err.body());
}

/** Fastify's own error codes, translated into the contract's. Anything unknown is a 5001. */
export function toApiError(err: unknown): ApiError {
  if (isApiError(err)) return err;
  const fst = err as Partial<FastifyError> | undefined;
  switch (fst?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('FILE_TOO_LARGE', undefined, { connection: 'close' });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_VALIDATION':
      return new ApiError('BAD_REQUEST', fst.message);
  }
  // Client aborts and malformed framing surface as 4xx status codes on Fastify errors.
  if (typeof fst?.statusCode === 'number' && fst.statusCode >= 400 && fst.statusCode < 500) {
    return new ApiError('BAD_REQUEST', fst.message ?? 'Bad request');
  }
  return new ApiError('UNAVAILABLE');
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export interface EnvelopeOptions {
  /**
   * The most body bytes discarded after a refusal before the connection is cut. Refusals (401, 429,
   * 503, a bad type …) are answered before the upload is read; a client that sends its whole body
   * before reading the answer (most do) would see a reset instead of our answer if we closed at once.
   * So the rest of the body is read and thrown away — never stored — up to the upload limit.
   */
  maxDiscardBytes?: number;
}

const DEFAULT_MAX_DISCARD_BYTES = 52_428_800 + 1024 * 1024;

/** Reads and drops the rest of a refused request body; cuts the connection past `maxBytes`. */
function discardBody(request: FastifyRequest, maxBytes: number): void {
  const raw = request.raw;
  let discarded = 0;
  raw.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > maxBytes) raw.socket?.destroy();
  });
  raw.on('error', () => raw.socket?.destroy());
  raw.resume();
}

/** Error, 404 and 405 handling in the envelope shape; call once on the root instance. */
export function installEnvelopeHandlers(app: FastifyInstance, opts: EnvelopeOptions = {}): void {
  const maxDiscardBytes = opts.maxDiscardBytes ?? DEFAULT_MAX_DISCARD_BYTES;
  app.setErrorHandler((err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const apiError = toApiError(err);
    if (apiError.status >= 500) request.log.error({ err }, 'request failed');
    // Errors after which reading on is pointless (too large, stalled) carry `connection: close`
    // themselves: a 2 GB upload is cut off there. Any other refusal drains the body.
    if (!request.raw.complete && apiError.headers.connection !== 'close')
      discardBody(request, maxDiscardBytes);
    return sendError(reply, apiError);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = METHODS.filter((method) => app.hasRoute({ url: path, method }));
    if (allowed.length > 0) {
      reply.header('allow', allowed.join(', '));
      return sendError(
        reply,
        new ApiError('METHOD_NOT_ALLOWED', `Method ${request.method} not allowed on ${path}`),
      );
    }
    return sendError(reply, new ApiError('NOT_FOUND', `No route ${request.method} ${path}`));
  });
}
