// The console's defence against cross-site requests, beside SameSite=Strict cookies and JSON-only
// bodies: every state-changing request must come from the console's own origin (Origin /
// Sec-Fetch-Site), and a logged-in user's must carry the session's CSRF token in X-CSRF-Token — a
// token derived from the HttpOnly session cookie, so that no other site can know it.

import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../../../lib/common/errors.ts';
import { headerValue } from '../../../lib/common/header-value.ts';

/** The CSRF token of a session: derivable only from the HttpOnly cookie, so never by another site. */
export function csrfToken(sessionToken: string): string {
  return createHmac('sha256', sessionToken).update('nsfwdetector console csrf v1').digest('hex');
}

/** Refuses (4011) a request whose X-CSRF-Token is not the token of `sessionToken`. */
export function assertCsrfToken(request: FastifyRequest, sessionToken: string): void {
  const presented = Buffer.from(headerValue(request.headers['x-csrf-token']) ?? '');
  const expected = Buffer.from(csrfToken(sessionToken));
  if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
    throw new ApiError('INVALID_API_KEY', 'Missing or invalid CSRF token; reload the console');
  }
}

/**
 * Refuses a state-changing request that a browser marks as coming from another site. Clients that
 * send neither header (curl, scripts) are not browsers and cannot be driven by another site.
 */
export function assertSameOrigin(request: FastifyRequest): void {
  const site = headerValue(request.headers['sec-fetch-site']);
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new ApiError('INVALID_API_KEY', 'Cross-site request refused');
  }
  const origin = headerValue(request.headers.origin);
  if (origin === undefined) return;
  if (sameHost(origin, `${request.protocol}://${request.host}`)) return;
  throw new ApiError('INVALID_API_KEY', 'Cross-site request refused');
}

/** Compares the scheme-less host:port of two origins, with default ports normalised away. */
function sameHost(a: string, b: string): boolean {
  try {
    return new URL(a).host === new URL(b).host;
  } catch {
    return false;
  }
}
