// Console password hashes: scrypt (node:crypto) with a per-user random salt, compared in constant time.
// The stored string carries its own parameters, so they can be raised later without breaking old
// hashes: `scrypt$<N>$<r>$<p>$<salt base64>$<hash base64>`.

import { randomBytes, type ScryptOptions, scrypt, timingSafeEqual } from 'node:crypto';

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

/** 2^15 × 8 × 128 B = 32 MiB and roughly 50–100 ms per hash on one core (OWASP's scrypt baseline). */
export const DEFAULT_SCRYPT: ScryptParams = { N: 2 ** 15, r: 8, p: 1 };

const KEY_LENGTH = 32;
const SALT_BYTES = 16;
// Bounds for parameters read back from a stored hash, so a tampered record cannot make us allocate
// gigabytes or spin for minutes.
const MAX_N = 2 ** 20;
const MAX_R = 16;
const MAX_P = 4;

function derive(password: string, salt: Buffer, params: ScryptParams): Promise<Buffer> {
  const options: ScryptOptions = {
    N: params.N,
    r: params.r,
    p: params.p,
    maxmem: 256 * params.N * params.r + 1024 * 1024,
  };
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFKC'), salt, KEY_LENGTH, options, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

export async function hashPassword(password: string, params: ScryptParams = DEFAULT_SCRYPT): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const key = await derive(password, salt, params);
  return ['scrypt', params.N, params.r, params.p, salt.toString('base64'), key.toString('base64')].join('$');
}

function parse(stored: string): { params: ScryptParams; salt: Buffer; key: Buffer } | undefined {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return undefined;
  const [N, r, p] = parts.slice(1, 4).map((v) => (/^\d{1,8}$/.test(v ?? '') ? Number(v) : Number.NaN));
  if (N === undefined || r === undefined || p === undefined) return undefined;
  const powerOfTwo = Number.isInteger(N) && N > 1 && (N & (N - 1)) === 0;
  if (!powerOfTwo || N > MAX_N || !(r >= 1 && r <= MAX_R) || !(p >= 1 && p <= MAX_P)) return undefined;
  const salt = Buffer.from(parts[4] ?? '', 'base64');
  const key = Buffer.from(parts[5] ?? '', 'base64');
  if (salt.length < 8 || key.length !== KEY_LENGTH) return undefined;
  return { params: { N, r, p }, salt, key };
}

/**
 * True when `password` matches `stored`. A malformed or empty stored hash (an account created without
 * a password) never matches, and still costs one hash, so timing does not tell the cases apart.
 */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parsed = parse(stored);
  if (!parsed) {
    await derive(password, randomBytes(SALT_BYTES), DEFAULT_SCRYPT);
    return false;
  }
  const key = await derive(password, parsed.salt, parsed.params);
  return timingSafeEqual(key, parsed.key);
}

/** A console password's length, in characters: the console's sign-up and change, and the admin CLI. */
export const PASSWORD_MIN = 10;
export const PASSWORD_MAX = 256;

/** Why `password` cannot be a console password, or undefined. */
export function passwordProblem(password: string): string | undefined {
  if (password.length < PASSWORD_MIN) return `Use a password of at least ${PASSWORD_MIN} characters`;
  if (password.length > PASSWORD_MAX) return `Use a password of at most ${PASSWORD_MAX} characters`;
  return undefined;
}

/** Spends the same work as a real verification, for logins with an unknown email. */
export async function burnPasswordCheck(password: string): Promise<void> {
  await derive(password, randomBytes(SALT_BYTES), DEFAULT_SCRYPT);
}
