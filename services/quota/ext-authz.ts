// The ext_authz transport: Envoy's HTTP authorization service protocol, translated to and from
// authorize(). Envoy's `ext_authz` filter (http_service) calls this service with the ORIGINAL method
// and the original path behind `path_prefix` (e.g. POST /ext_authz/api/open/detect), the headers its
// `allowed_headers` select, and no body. Envoy then:
// - on 200: lets the request through, copying the headers matched by `allowed_upstream_headers` onto
//   the upstream request (UPSTREAM_HEADERS) and, since Envoy 1.25, those matched by
//   `allowed_client_headers_on_success` onto the response to the client (CLIENT_HEADERS_ON_SUCCESS);
// - on any other status: answers the client with that status, this body, and the headers matched by
//   `allowed_client_headers` (CLIENT_HEADERS_ON_DENY).
// The Envoy configuration (charts/nsfwdetector/files/envoy.yaml.tpl) uses exactly these lists, sets
// `status_on_error` to 503 and `failure_mode_allow: false` (an unreachable quota service must never mean
// "allowed"), and strips client-sent copies of UPSTREAM_HEADERS before the filter
// (test/e2e/envoy-config.test.ts checks it).
//
// Refunds: an allowed detect request carries its charge id upstream (x-charge-id). When the upstream
// then answers 503 (detect busy, draining, or gone), the edge posts that id to REFUND_PATH_PREFIX/<id>
// and the charge is taken back, as the embedded server refunds its own 503s; when the store cannot, the
// answer is 503/5001 and the edge asks once more (refunds are idempotent per charge id). That path is
// only for the edge on its loopback/sidecar port: Envoy routes no client request to it. A forged id
// takes nothing back (ids are random UUIDs; an unknown one is only marked as used).

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ANONYMOUS_ACCOUNT } from '../../lib/common/authorizer.ts';
import { sendError } from '../../lib/common/envelope.ts';
import { ApiError } from '../../lib/common/errors.ts';
import { headerValue } from '../../lib/common/header-value.ts';
import { detectEndpointOf, HTTP_METHODS } from '../../lib/common/routes.ts';
import type { Authorizer } from './authorize.ts';

/** Request headers this transport reads (Envoy `allowed_headers`). */
export const CHECK_REQUEST_HEADERS = ['authorization', 'x-device-id', 'x-forwarded-for'] as const;
/** Set on every allowed detect request for the detect service (Envoy `allowed_upstream_headers`). */
export const UPSTREAM_HEADERS = ['x-account-id', 'x-quota-tier', 'x-charge-id'] as const;
/** Added to the client's response on success (Envoy `allowed_client_headers_on_success`). */
export const CLIENT_HEADERS_ON_SUCCESS = [
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
  'x-quota-tier',
] as const;
/** Sent to the client with a refusal (Envoy `allowed_client_headers`). */
export const CLIENT_HEADERS_ON_DENY = [...CLIENT_HEADERS_ON_SUCCESS, 'retry-after', 'content-type'] as const;

export const DEFAULT_PATH_PREFIX = '/ext_authz';

/** POST REFUND_PATH_PREFIX/<charge id>: the edge takes back the charge of a request answered 503. */
export const REFUND_PATH_PREFIX = '/ext_authz-refund';

/** What a charge id looks like (authorize() makes UUIDs); anything else is refused unread. */
const CHARGE_ID = /^[0-9A-Za-z-]{1,64}$/;

export interface ExtAuthzOptions {
  authorizer: Authorizer;
  /** Envoy's `path_prefix`. */
  pathPrefix?: string;
}

/** Registers the check endpoint; encapsulated, so its "ignore any body" parser stays local. */
export default async function extAuthz(app: FastifyInstance, opts: ExtAuthzOptions): Promise<void> {
  const prefix = opts.pathPrefix ?? DEFAULT_PATH_PREFIX;
  // Envoy sends no body (unless with_request_body is set, which we do not need): whatever comes is
  // drained unread, whatever its Content-Type.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, payload, done) => {
    payload.resume();
    payload.on('end', () => done(null));
    payload.on('error', (err) => done(err));
  });

  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const originalPath = (request.url.slice(prefix.length).split('?')[0] ?? '').replace(/\/+$/, '');
    const endpoint = detectEndpointOf(originalPath);
    // Only POST to a detect path is counted; anything else (a GET the upstream will answer with 405,
    // a route that should not have been sent here) passes without touching any quota.
    if (endpoint === undefined || request.method !== 'POST') return reply.code(200).send();
    const decision = await opts.authorizer.authorize({
      endpoint,
      clientIp: request.clientKey,
      deviceId: headerValue(request.headers['x-device-id']),
      authorization: headerValue(request.headers.authorization),
    });
    if (!decision.allowed) return sendError(reply, decision.error);
    return reply
      .code(200)
      .headers({
        ...decision.headers,
        'x-account-id': decision.accountId ?? ANONYMOUS_ACCOUNT,
        'x-quota-tier': decision.tier,
        ...(decision.requestId === undefined ? {} : { 'x-charge-id': decision.requestId }),
      })
      .send();
  };

  app.post<{ Params: { chargeId: string } }>(`${REFUND_PATH_PREFIX}/:chargeId`, async (request, reply) => {
    const { chargeId } = request.params;
    if (!CHARGE_ID.test(chargeId)) return sendError(reply, new ApiError('BAD_REQUEST', 'Not a charge id'));
    // A store failure is the edge's to retry (the refund is idempotent per charge id), not a success.
    if (!(await opts.authorizer.refund(chargeId))) {
      return sendError(reply, new ApiError('UNAVAILABLE', 'The charge could not be taken back: ask again'));
    }
    return reply.code(204).send();
  });

  app.route({ method: [...HTTP_METHODS], url: prefix, handler });
  app.route({ method: [...HTTP_METHODS], url: `${prefix}/*`, handler });
}
