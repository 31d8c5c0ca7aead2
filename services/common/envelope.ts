// The response envelope of spec 2.1 and the hooks that make every failure, including Fastify's own
// and routing misses, leave in that shape. Only 5xx are logged: 4xx are the caller's business.

import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, isApiError } from './errors.ts';

export function ok<T>(data: T): { code: 0; message: 'ok'; data: T } {
  return { code: 0, message: 'ok', data };
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
      return new ApiError('FILE_TOO_LARGE');
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

/** Error, 404 and 405 handling in the envelope shape; call once on the root instance. */
export function installEnvelopeHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const apiError = toApiError(err);
    if (apiError.status >= 500) request.log.error({ err }, 'request failed');
    // A body we refused to read must not be read: close the connection rather than drain it.
    if (!request.raw.complete) reply.header('connection', 'close');
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
