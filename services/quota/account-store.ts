// Accounts, their API keys and console sessions (spec 4.2, 5; DESIGN "API keys"). Two implementations
// sit behind these interfaces: Redis (cluster, or embedded with REDIS_URL) and a local JSON file written
// atomically (embedded default). Chosen at the composition root, never by `if` inside.
//
// Rules every implementation keeps:
// - A key's secret is never stored: only its SHA-256 (hex). The secret leaves `createKey` once.
// - `resolveKey` reads the store on every call (no cache), so revocation and tier changes take effect
//   on the very next request on every replica.
// - A session token is never stored either: only its SHA-256.
// - Times are ISO-8601 strings in UTC (`new Date().toISOString()`).
// - A store that cannot answer (Redis down, file unreadable) rejects with the underlying error; the
//   caller maps it (authorize → 503/5001). "Not found" is `undefined`, never an exception.

import type { AccountTier } from '../common/account-tier.ts';

export { ACCOUNT_TIERS, type AccountTier, isAccountTier } from '../common/account-tier.ts';

export interface Account {
  /** `acc_` + 16 lowercase hex. */
  id: string;
  /** Normalised: trimmed, lowercase. Unique across accounts. */
  email: string;
  tier: AccountTier;
  /**
   * Opaque password hash string produced by the console (scrypt). The store only keeps it. Accounts
   * created by the admin CLI without a password have '' (no console login possible).
   */
  passwordHash: string;
  createdAt: string;
}

export interface ApiKeyRecord {
  /** `key_` + 16 lowercase hex; what listings, the console and the admin CLI refer to. */
  id: string;
  accountId: string;
  /** Optional label chosen by the user ("" when none). */
  name: string;
  /** Display only: `nsk_live_` + first 4 hex of the secret, e.g. `nsk_live_3f9a`. */
  prefix: string;
  /** Display only: the last 4 characters of the secret. */
  last4: string;
  createdAt: string;
  /** Updated by `touchKey`; the authorizer calls it at most once a minute per key (TOUCH_INTERVAL_MS). */
  lastUsedAt: string | null;
  /** Set once by `revokeKey`; a revoked key never resolves again. */
  revokedAt: string | null;
}

export interface CreatedKey {
  record: ApiKeyRecord;
  /** The full secret, `nsk_live_` + 32 lowercase hex. Shown once; not recoverable afterwards. */
  secret: string;
}

export interface ResolvedKey {
  key: ApiKeyRecord;
  /** The owning account as stored now (current tier). */
  account: Account;
}

export interface NewAccount {
  email: string;
  tier: AccountTier;
  /** '' for an account without console login (admin CLI). */
  passwordHash?: string;
}

/** The email is already registered (createAccount). */
export class EmailTakenError extends Error {
  override name = 'EmailTakenError';
  constructor(email: string) {
    super(`An account with email ${email} already exists`);
  }
}

export interface AccountStore {
  /** Rejects with EmailTakenError when the (normalised) email exists. */
  createAccount(input: NewAccount): Promise<Account>;
  getAccount(accountId: string): Promise<Account | undefined>;
  /** Email is normalised (trim + lowercase) before lookup. */
  findAccountByEmail(email: string): Promise<Account | undefined>;
  /** All accounts, oldest first (admin CLI). */
  listAccounts(): Promise<Account[]>;
  /** Returns the updated account, or undefined when it does not exist. */
  setTier(accountId: string, tier: AccountTier): Promise<Account | undefined>;
  /** Returns the updated account, or undefined when it does not exist. */
  setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined>;

  /** Generates a new secret; undefined when the account does not exist. */
  createKey(accountId: string, opts?: { name?: string }): Promise<CreatedKey | undefined>;
  /** Keys of the account, revoked ones included (they carry revokedAt), newest first. */
  listKeys(accountId: string): Promise<ApiKeyRecord[]>;
  getKey(keyId: string): Promise<ApiKeyRecord | undefined>;
  /**
   * Revokes a key. With `accountId`, only a key of that account is revoked (the console passes the
   * session's account). Returns the revoked record (idempotent: an already revoked key is returned as
   * is), or undefined when no such key (of that account) exists.
   */
  revokeKey(keyId: string, accountId?: string): Promise<ApiKeyRecord | undefined>;
  /**
   * Authorization path: the full secret as presented. Undefined when the format is wrong, the key is
   * unknown or revoked, or its account no longer exists. One store round trip at most, no cache.
   */
  resolveKey(secret: string): Promise<ResolvedKey | undefined>;
  /** Records a use of the key (lastUsedAt). Best effort: callers may ignore its failure. */
  touchKey(keyId: string, at?: Date): Promise<void>;

  close(): Promise<void>;
}

export interface Session {
  accountId: string;
  /** ISO-8601. */
  expiresAt: string;
}

export interface SessionStore {
  /** Returns a fresh random opaque token (64 hex) for a cookie; only its hash is stored. */
  createSession(accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: string }>;
  /** Undefined when unknown or expired. */
  resolveSession(token: string): Promise<Session | undefined>;
  /** Idempotent. */
  deleteSession(token: string): Promise<void>;
  close(): Promise<void>;
}

export function normaliseEmail(email: string): string {
  return email.trim().toLowerCase();
}
