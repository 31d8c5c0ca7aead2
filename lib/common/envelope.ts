// The response envelope of spec 2.1 and the hooks that make every failure, including Fastify's own
// and routing misses, leave in that shape. Refusals are counted (refusal-log.ts); only unexpected
// exceptions are logged one by one, at error, with their stack.

import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { destroySocket, type LingerOptions, lingerOnClose, readToEnd } from './connection-guards.ts';
import { ApiError, isApiError } from './errors.ts';
import { DEFAULT_MAX_FILE_BYTES, FRAMING_BYTES } from './http-limits.ts';
import { RefusalLog } from './refusal-log.ts';
import { HTTP_METHODS } from './routes.ts';

export function ok<T>(data: T): { code: 0; message: 'ok'; data: T } {
  return { code: 0, message: 'ok', data };
}

/** JSON schema of a success envelope around `data` (responses are serialized with it). */
export function okSchema<const T extends object>(data: T) {
  return {
    type: 'object',
    required: ['code', 'message', 'data'],
    properties: {
      code: { type: 'integer', enum: [0], description: '0 on success.' },
      message: { type: 'string', enum: ['ok'], description: '"ok" on success.' },
      data: { description: 'The result (only on success).', ...data },
    },
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

/** The methods `path` is routed for (empty: no such route), for 405 and its `Allow` header. */
export function allowedMethods(app: FastifyInstance, path: string): string[] {
  return HTTP_METHODS.filter((method) => app.hasRoute({ url: path, method }));
}

export interface EnvelopeOptions {
  /**
   * After a refusal, how much of the rest of the body is read and dropped (bytes and time) before the
   * connection is cut. Refusals (401, 429, 503, too large, a bad type …) are answered before the
   * upload is read; a client that sends its whole body before reading the answer (most do) would see
   * a reset instead of our answer if we closed at once. Never stored.
   */
  linger?: LingerOptions;
  /** Where refusals are counted (one summary line per interval); default: a RefusalLog on app.log. */
  refusals?: RefusalLog;
  /**
   * Behind a proxy that streams requests (Envoy): read the rest of a refused body, within `linger`,
   * BEFORE answering. Such a proxy passes on an answer that comes before the end of its request and
   * then resets the client's connection, which throws the answer away for a client still writing its
   * body; lingering after the answer, which serves direct clients, cannot help there. Past `linger`
   * the answer goes anyway, closing the connection.
   */
  answerAfterBody?: boolean;
}

const DEFAULT_LINGER: LingerOptions = {
  maxBytes: 2 * DEFAULT_MAX_FILE_BYTES + FRAMING_BYTES,
  maxMs: 10_000,
  idleMs: 2_000,
};

/** Reads and drops the rest of a refused request body on a kept-alive connection, within `linger`. */
function discardBody(request: FastifyRequest, linger: LingerOptions): void {
  void readToEnd(request.raw, linger).then((ended) => ended || destroySocket(request.raw.socket));
}

/** Error, 404 and 405 handling in the envelope shape; call once on the root instance. */
export function installEnvelopeHandlers(app: FastifyInstance, opts: EnvelopeOptions = {}): void {
  const linger = opts.linger ?? DEFAULT_LINGER;
  const refusals = opts.refusals ?? new RefusalLog(app.log);
  app.addHook('onClose', async () => refusals.flush());
  // HTTP/1.1 requires Host (RFC 9112 3.2). Node would answer an empty 400 itself; the root app turns
  // that off (requireHostHeader: false) so that the refusal is in the envelope.
  app.addHook('onRequest', async (request) => {
    if (request.raw.httpVersion === '1.1' && !request.headers.host) {
      throw new ApiError('BAD_REQUEST', 'Bad request: missing Host header', { connection: 'close' });
    }
  });
  app.setErrorHandler(async (err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const apiError = toApiError(err);
    if (isApiError(err)) {
      // A refusal we chose (overload, bad key, rate limit …): counted, no stack trace; the fault
      // behind a 5xx refusal, if any, is logged once per interval (refusal-log.ts).
      const fault = err.cause instanceof Error ? err.cause : undefined;
      refusals.record(apiError.code, fault?.message ?? apiError.message, fault);
    } else if (apiError.status >= 500) {
      request.log.error({ err }, 'request failed');
    } else {
      refusals.record(apiError.code);
    }
    if (!request.raw.complete && opts.answerAfterBody) {
      if (!(await readToEnd(request.raw, linger))) reply.header('connection', 'close');
      return sendError(reply, apiError);
    }
    if (!request.raw.complete) {
      // Errors after which reading on is pointless (too large, stalled) carry `connection: close`:
      // the answer is sent, then the connection lingers (bounded) so the client can read it.
      // Any other refusal drains the body and keeps the connection.
      if (apiError.headers.connection === 'close') lingerOnClose(request.raw, linger);
      else discardBody(request, linger);
    }
    return sendError(reply, apiError);
  });

  // No route: 405 (with Allow) or 404, decided as the request arrives — before Fastify would parse a
  // body of a method it reads bodies for (QUERY), which has no route to go to.
  const unrouted = (request: FastifyRequest): ApiError => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = allowedMethods(app, path);
    if (allowed.length === 0) return new ApiError('NOT_FOUND', `No route ${request.method} ${path}`);
    return new ApiError('METHOD_NOT_ALLOWED', `Method ${request.method} not allowed on ${path}`, {
      allow: allowed.join(', '),
    });
  };
  app.addHook('onRequest', async (request) => {
    if (request.is404) throw unrouted(request);
  });
  app.setNotFoundHandler((request) => {
    throw unrouted(request);
  });
}
