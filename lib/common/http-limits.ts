// The framing limits of a request, shared by every Node server and the edge (Envoy), so that nothing
// the edge lets through — and ext_authz counts — is refused afterwards by a service for its framing.

/**
 * Request line and headers a client may send, in bytes (Node's default maxHeaderSize). Over it: 431/4310
 * from the first hop — the embedded server, or Envoy (the chart's templates/_derived.tpl is generated from
 * this by `npm run settings`) before ext_authz, so such a request is never counted.
 */
export const MAX_REQUEST_HEADER_BYTES = 16 * 1024;

/**
 * What a proxy in front adds to a request's headers (Envoy: X-Forwarded-For, X-Request-Id, traceparent,
 * the identity headers after ext_authz, x-edge-secret — about 0.5 KiB): a service that trusts a proxy
 * (TRUSTED_PROXY_HOPS > 0) accepts this much more, so a request at the client limit still fits.
 */
export const PROXY_ADDED_HEADER_BYTES = 8 * 1024;

/** Headers a client may send at the edge (Envoy's max_headers_count; Node never refuses by count). */
export const MAX_REQUEST_HEADERS = 100;

/** The maxHeaderSize of a Node server behind `trustedProxyHops` proxies. */
export function maxHeaderBytes(trustedProxyHops: number): number {
  return MAX_REQUEST_HEADER_BYTES + (trustedProxyHops > 0 ? PROXY_ADDED_HEADER_BYTES : 0);
}

/** Spec 5: the largest accepted image, 50 MiB (MAX_FILE_BYTES by default; a policy may only lower it). */
export const DEFAULT_MAX_FILE_BYTES = 52_428_800;

/**
 * What a multipart body may hold besides the file (boundaries, part headers, bounded form fields): a
 * body past `MAX_FILE_BYTES` + this is refused as too large without reading the rest (every server,
 * and the edge's length check).
 */
export const FRAMING_BYTES = 1024 * 1024;
