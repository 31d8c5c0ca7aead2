// The console's cookies: reading one from a request's Cookie header, and the Set-Cookie values it
// sends — all `HttpOnly; SameSite=Strict` (no script reads them, no other site sends them), `Secure`
// on https. The session cookie is a random token the store keeps only the hash of.

/** The session token's cookie, sent to everything under /console. */
export const SESSION_COOKIE = 'nsd_session';

/** The value of cookie `name` in a Cookie header, or undefined. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The session cookie (an empty value with max-age 0 ends it). */
export function sessionCookie(token: string, maxAgeSeconds: number, secure: boolean): string {
  return strictCookie(SESSION_COOKIE, token, '/console', maxAgeSeconds, secure);
}

/** A Set-Cookie value no script reads and no other site sends, under `path`. */
export function strictCookie(
  name: string,
  value: string,
  path: string,
  maxAgeSeconds: number,
  secure: boolean,
): string {
  return [
    `${name}=${value}`,
    `Path=${path}`,
    'HttpOnly',
    'SameSite=Strict',
    `Max-Age=${maxAgeSeconds}`,
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}
