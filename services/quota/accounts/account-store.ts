// Accounts, their API keys and console sessions (spec 4.2, 5; DESIGN "API keys"). Two implementations
// sit behind these interfaces: Redis (cluster, or embedded with REDIS_URL) and an SQLite database
// (embedded default, sqlite-account-store.ts). Chosen at the composition root, never by `if` inside.
//
// Rules every implementation keeps:
// - A key's secret is never stored: only its SHA-256 (hex). The secret leaves `createKey` once.
// - `resolveKey` reads the store on every call (no cache), so revocation and tier changes take effect
//   on the very next request on every replica.
// - A session token is never stored either: only its SHA-256.
// - Times are ISO-8601 strings in UTC (`new Date().toISOString()`).
// - A store that cannot answer (Redis down, database unreadable) rejects with the underlying error; the
//   caller maps it (authorize → 503/5001). "Not found" is `undefined`, never an exception.
// - A write resolves only once it is stored (SQLite: its COMMIT succeeded; Redis: the server applied
//   it); one the store refuses (disk full, read-only, out of memory) rejects with StoreWriteError.

import type { AccountTier } from '../../../lib/common/account-tier.ts';

export { ACCOUNT_TIERS, type AccountTier, isAccountTier } from '../../../lib/common/account-tier.ts';

export interface Account {
  /** `acc_` + 16 lowercase hex. */
  id: string;
  /** Normalised by `normaliseEmail` (NFKC, case-folded, trimmed). Unique across accounts. */
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
  /** Updated by `touchKey`: at most once per key per KEY_LAST_USED_INTERVAL_MS (a minute), by the store itself. */
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

/** The email holds characters that no address may hold (createAccount). */
export class InvalidEmailError extends Error {
  override name = 'InvalidEmailError';
}

/** The account already holds `maxActive` unrevoked keys (createKey with maxActive). */
export class KeyLimitError extends Error {
  override name = 'KeyLimitError';
  readonly maxActive: number;
  constructor(maxActive: number) {
    super(`At most ${maxActive} active keys per account; revoke one first`);
    this.maxActive = maxActive;
  }
}

/**
 * A write the store could not confirm (disk full, read-only directory, Redis out of memory or refusing
 * writes after a failed save): it was not acknowledged, and nothing of it acts (callers answer 503/5001).
 */
export class StoreWriteError extends Error {
  override name = 'StoreWriteError';
}

/** What an implementation may be told besides its connection (openStores: the settings). */
export interface AccountStoreOptions {
  /** A key's last use is written at most once per this interval (KEY_LAST_USED_INTERVAL_MS); default TOUCH_INTERVAL_MS. */
  touchIntervalMs?: number;
}

export interface AccountStore {
  /**
   * Rejects with EmailTakenError when the (normalised) email exists, InvalidEmailError when it holds
   * characters `emailProblem` refuses.
   */
  createAccount(input: NewAccount): Promise<Account>;
  getAccount(accountId: string): Promise<Account | undefined>;
  /** Email is normalised (`normaliseEmail`) before lookup. Undefined for an email `emailProblem` refuses. */
  findAccountByEmail(email: string): Promise<Account | undefined>;
  /** All accounts, oldest first (admin CLI). */
  listAccounts(): Promise<Account[]>;
  /** Returns the updated account, or undefined when it does not exist. */
  setTier(accountId: string, tier: AccountTier): Promise<Account | undefined>;
  /** Returns the updated account, or undefined when it does not exist. */
  setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined>;

  /**
   * Generates a new secret; undefined when the account does not exist. With `maxActive`, rejects with
   * KeyLimitError when the account already has that many unrevoked keys: the count and the creation
   * are one atomic step, so concurrent creations never pass the limit together.
   */
  createKey(accountId: string, opts?: { name?: string; maxActive?: number }): Promise<CreatedKey | undefined>;
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
  /**
   * Records a use of the key (lastUsedAt) unless one less than the store's interval
   * (KEY_LAST_USED_INTERVAL_MS, default TOUCH_INTERVAL_MS) before `at` is recorded already: at most one write per key per interval, whoever calls. Best effort: callers may
   * ignore its failure.
   */
  touchKey(keyId: string, at?: Date): Promise<void>;
  /**
   * Removes the account with everything it owns: its keys (they never resolve again) and their
   * records, its email (free to register again). Quota counters and usage history are left to expire.
   * Sessions of the account may outlive it in the store (Redis keeps them until they expire) but log
   * nobody in: the console reads the account of every session. Idempotent: false when there was no
   * such account.
   */
  deleteAccount(accountId: string): Promise<boolean>;
  /**
   * Deletes, as deleteAccount does, every console sign-up (an account with a password) created before
   * `createdBefore` that never had a key (revoked ones count as had), so never made a request: the
   * bound on accounts nobody uses. Accounts the admin CLI made (no password) are kept. Returns how
   * many went. Atomic per account: one that gets a key meanwhile stays.
   */
  pruneUnusedAccounts(createdBefore: Date): Promise<number>;

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

// ---- emails ----------------------------------------------------------------------------------------
// One person, one account: two spellings a reader cannot tell apart must be the same address. So every
// email that enters (console, admin CLI, both stores) goes through `normaliseEmail`, and characters
// that exist only to look like something else (controls, zero-width and other format characters,
// fillers) are refused with `emailProblem` rather than silently dropped.

/**
 * Unicode NFKC (fullwidth `ＡＤＡ` → `ADA`, ligature `ﬁ` → `fi`), then case folding (upper then lower
 * case, so `ß`/`SS`/`ss` and `ς`/`σ` meet, as full case folding does), NFKC again (folding can
 * un-normalise), trimmed.
 */
export function normaliseEmail(email: string): string {
  return email.normalize('NFKC').toUpperCase().toLowerCase().normalize('NFKC').trim();
}

// Cc controls, Cf format characters (zero-width space/joiners, bidi controls, soft hyphen, BOM…),
// Zl/Zp separators, surrogates, private use, unassigned code points, and every other default-ignorable
// code point (combining grapheme joiner, Hangul fillers, variation selectors…): characters a reader
// does not see. Whitespace inside the address is refused separately.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{Co}\p{Cn}\p{Default_Ignorable_Code_Point}]/u;

/** The first invisible or control character of `text` (see INVISIBLE) as `U+XXXX`, or undefined. */
export function invisibleCharacter(text: string): string | undefined {
  const found = INVISIBLE.exec(text);
  if (!found) return undefined;
  return `U+${(found[0].codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')}`;
}

/**
 * Why this email cannot be an account's address (a sentence for the user), or undefined when it can.
 * Checked on the raw input and on its normalised form (NFKC can produce a space from U+00A0 etc.).
 */
export function emailProblem(email: string): string | undefined {
  for (const form of [email, normaliseEmail(email)]) {
    const cp = invisibleCharacter(form);
    if (cp) return `The email contains an invisible or control character (${cp}); type the address again`;
  }
  if (/\s/u.test(normaliseEmail(email))) return 'The email must not contain spaces';
  return undefined;
}

/**
 * A key name as stored: NFKC (fullwidth and compatibility forms as the letters they look like),
 * trimmed. Names are labels, not identities: case is kept.
 */
export function normaliseKeyName(name: string): string {
  return name.normalize('NFKC').trim();
}

/** Why `name` cannot be a key's name (refused like an email's invisible characters), or undefined. */
export function keyNameProblem(name: string): string | undefined {
  for (const form of [name, normaliseKeyName(name)]) {
    const cp = invisibleCharacter(form);
    if (cp) return `The key name contains an invisible or control character (${cp}); type it again`;
  }
  return undefined;
}
