// The "known device" cookie: a device that has logged in to an account before carries a proof of it,
// signed with the account's password hash, and its login attempts count against a limit of their own
// instead of the per-email one — so a stranger guessing can exhaust the email's limit without locking
// the owner out of their own devices.

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Account } from '../accounts/account-store.ts';
import { readCookie, strictCookie } from './cookies.ts';

export const DEVICE_COOKIE = 'nsd_device';
const DEVICE_TTL_S = 400 * 24 * 60 * 60; // browsers cap cookie lifetimes at 400 days
const DEVICE_FORMAT = /^([0-9a-f]{32})\.([0-9a-f]{64})$/;

/**
 * Proof that this device logged in to this account: keyed by the account's password hash, a secret
 * only the server holds (so no server-wide key to configure, the same on every replica, and a password
 * change forgets every device).
 */
function deviceProof(account: Account, deviceId: string): string {
  return createHmac('sha256', account.passwordHash)
    .update(`nsfwdetector console known device v1\n${account.id}\n${deviceId}`)
    .digest('hex');
}

/** The device id of a valid known-device cookie for this account, else undefined. */
export function knownDevice(request: FastifyRequest, account: Account): string | undefined {
  // No password, no console login — and an HMAC keyed by '' would be forgeable.
  if (account.passwordHash === '') return undefined;
  const match = DEVICE_FORMAT.exec(readCookie(request.headers.cookie, DEVICE_COOKIE) ?? '');
  if (!match) return undefined;
  const [, deviceId = '', proof = ''] = match;
  const expected = Buffer.from(deviceProof(account, deviceId));
  return timingSafeEqual(Buffer.from(proof), expected) ? deviceId : undefined;
}

/**
 * The cookie a login sets: the device keeps its id across logins to the same account, otherwise it
 * gets a fresh one. Sent only to the login endpoint (the only place it is read).
 */
export function deviceCookie(request: FastifyRequest, account: Account, secure: boolean): string {
  const deviceId = knownDevice(request, account) ?? randomBytes(16).toString('hex');
  const value = `${deviceId}.${deviceProof(account, deviceId)}`;
  return strictCookie(DEVICE_COOKIE, value, '/console/api/login', DEVICE_TTL_S, secure);
}
