// The embedded AccountStore + SessionStore: accounts, key hashes and session hashes in one state object,
// kept either in memory (tests) or in a JSON file (`npm start`). The file is shared with the admin CLI,
// which runs as another process: every change takes an exclusive lock file, re-reads the file, applies
// the change and writes it atomically (temp file + fsync + rename); every read first checks (one stat)
// whether the file changed since it was loaded. So a key revoked or a tier changed by the CLI applies
// to the server's very next request, and neither process can overwrite the other's change.
//
// Crash safety (`kill -9` at any instruction): the file is only ever replaced by rename, so it is always
// the old or the new state. The lock file names its owner (pid, host, and the process's start time
// from /proc, so a recycled pid is not mistaken for the owner); a lock whose owner is dead is taken
// away at once — at start and by any writer that meets it — and temp files a dead writer left behind
// (they hold key and password hashes) are removed under the lock.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { link, mkdir, open, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import {
  type Account,
  type AccountStore,
  type AccountTier,
  type ApiKeyRecord,
  type CreatedKey,
  EmailTakenError,
  emailProblem,
  InvalidEmailError,
  isAccountTier,
  type NewAccount,
  normaliseEmail,
  type ResolvedKey,
  type Session,
  type SessionStore,
} from '../accounts/account-store.ts';
import {
  displayParts,
  generateApiKey,
  generateSessionToken,
  isValidApiKeyFormat,
  newId,
  sha256Hex,
} from '../accounts/api-keys.ts';

interface StoredKey extends ApiKeyRecord {
  /** SHA-256 hex of the secret. */
  hash: string;
}

interface State {
  version: 1;
  accounts: Record<string, Account>;
  keys: Record<string, StoredKey>;
  /** By SHA-256 of the session token. */
  sessions: Record<string, Session>;
}

function emptyState(): State {
  return { version: 1, accounts: {}, keys: {}, sessions: {} };
}

/** Where the state lives. `read` is the freshest state; `update` is exclusive across processes. */
export interface StateBox {
  read(): Promise<State>;
  update<T>(change: (state: State) => T): Promise<T>;
  close(): Promise<void>;
}

export class MemoryStateBox implements StateBox {
  #state = emptyState();
  async read(): Promise<State> {
    return this.#state;
  }
  async update<T>(change: (state: State) => T): Promise<T> {
    // Work on a copy so a change that throws half-way leaves nothing behind, as with the file.
    const next = structuredClone(this.#state);
    const result = change(next);
    this.#state = next;
    return result;
  }
  async close(): Promise<void> {}
}

/** The accounts file is missing something, or is not ours: refuse to start rather than overwrite it. */
export class AccountsFileError extends Error {
  override name = 'AccountsFileError';
}

const LOCK_WAIT_MS = 5_000;
/**
 * A lock whose owner cannot be checked (another host sharing the file, or an unreadable lock) is
 * taken as abandoned after this long; a live holder keeps it for milliseconds.
 */
const LOCK_STALE_MS = 10_000;
/** Leftover lock-attempt files of processes that may be alive are removed after this long. */
const LEFTOVER_MS = 60_000;

export interface FileStoreOptions {
  /** How long a writer waits for a live holder's lock before failing (tests lower it). */
  lockWaitMs?: number;
}

/** Who holds the lock: written into the lock file. */
interface LockOwner {
  pid: number;
  host: string;
  /** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); absent off Linux. */
  start?: string;
}

/** The start time of a process, from /proc (Linux); undefined where /proc is not available. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

const SELF: LockOwner = (() => {
  const start = processStartTime(process.pid);
  return { pid: process.pid, host: hostname(), ...(start === undefined ? {} : { start }) };
})();

/** 'dead' only when certain: no such process here, or its pid now belongs to a younger process. */
export function lockOwnerState(owner: LockOwner): 'alive' | 'dead' | 'unknown' {
  if (owner.host !== SELF.host) return 'unknown';
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    // EPERM: the process exists (another user's).
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return 'dead';
  }
  if (owner.start !== undefined) {
    const now = processStartTime(owner.pid);
    if (now !== undefined && now !== owner.start) return 'dead';
  }
  return 'alive';
}

function parseLockOwner(text: string): LockOwner | undefined {
  // Earlier releases wrote the bare pid.
  if (/^\d+$/.test(text.trim())) return { pid: Number(text.trim()), host: SELF.host };
  try {
    const o = JSON.parse(text) as Partial<LockOwner>;
    if (Number.isSafeInteger(o.pid) && typeof o.host === 'string')
      return {
        pid: o.pid as number,
        host: o.host,
        ...(typeof o.start === 'string' ? { start: o.start } : {}),
      };
  } catch {
    // not ours, or half-written by an older release: judged by age
  }
  return undefined;
}

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException)?.code;
}

interface FileVersion {
  ino: bigint;
  size: bigint;
  mtimeNs: bigint;
}

export class JsonFileStateBox implements StateBox {
  readonly path: string;
  #state: State = emptyState();
  #version: FileVersion | undefined;
  /** Serialises this process's own updates; the lock file serialises them with other processes. */
  #queue: Promise<unknown> = Promise.resolve();
  readonly #lockPath: string;
  readonly #lockWaitMs: number;
  /** False once the file system refused a hard link (some network and FAT mounts). */
  #canLink = true;
  /** Remove a dead writer's leftovers at the next update: set at open and after breaking a lock. */
  #sweep = true;

  private constructor(path: string, opts: FileStoreOptions) {
    this.path = path;
    this.#lockPath = `${path}.lock`;
    this.#lockWaitMs = opts.lockWaitMs ?? LOCK_WAIT_MS;
  }

  /** Validates (or creates) the file at boot; a bad file stops the process with a clear message. */
  static async open(path: string, opts: FileStoreOptions = {}): Promise<JsonFileStateBox> {
    const box = new JsonFileStateBox(path, opts);
    try {
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new AccountsFileError(`cannot create the directory of ACCOUNTS_FILE ${path}`, { cause: err });
    }
    // An update reads the file if present, validates it, and writes it back: this proves at boot that
    // the file is ours and that the directory is writable.
    await box.update(() => undefined);
    return box;
  }

  async read(): Promise<State> {
    const current = await this.#currentVersion();
    if (!sameVersion(current, this.#version)) await this.#load(current);
    return this.#state;
  }

  update<T>(change: (state: State) => T): Promise<T> {
    const run = this.#queue.then(() => this.#locked(change));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {
    await this.#queue;
  }

  async #locked<T>(change: (state: State) => T): Promise<T> {
    const release = await this.#lock();
    try {
      if (this.#sweep) await this.#removeLeftovers();
      const current = await this.#currentVersion();
      if (!sameVersion(current, this.#version)) await this.#load(current);
      const next = structuredClone(this.#state);
      const result = change(next);
      await this.#write(next);
      return result;
    } finally {
      await release();
    }
  }

  async #currentVersion(): Promise<FileVersion | undefined> {
    try {
      const s = await stat(this.path, { bigint: true });
      return { ino: s.ino, size: s.size, mtimeNs: s.mtimeNs };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  async #load(version: FileVersion | undefined): Promise<void> {
    if (version === undefined) {
      this.#state = emptyState();
      this.#version = undefined;
      return;
    }
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      throw new AccountsFileError(`cannot read ACCOUNTS_FILE ${this.path}`, { cause: err });
    }
    this.#state = parseState(text, this.path);
    this.#version = version;
  }

  async #write(state: State): Promise<void> {
    const tmp = `${this.path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      const handle = await open(tmp, 'wx', 0o600);
      try {
        await handle.writeFile(`${JSON.stringify(state, null, 2)}\n`, 'utf8');
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(tmp, this.path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw new AccountsFileError(`cannot write ACCOUNTS_FILE ${this.path}`, { cause: err });
    }
    this.#state = state;
    this.#version = await this.#currentVersion();
  }

  /**
   * An exclusive lock file that names its owner. It is created complete or not at all: the owner is
   * written to a file of our own, which is then hard-linked to the lock name (fails if it exists).
   */
  async #lock(): Promise<() => Promise<void>> {
    const lockPath = this.#lockPath;
    const attempt = `${lockPath}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      await writeFile(attempt, JSON.stringify(SELF), { flag: 'wx', mode: 0o600 });
    } catch (err) {
      throw new AccountsFileError(`cannot lock ACCOUNTS_FILE ${this.path}`, { cause: err });
    }
    let deadline = Date.now() + this.#lockWaitMs;
    const latest = deadline + LOCK_STALE_MS + 100;
    try {
      for (;;) {
        try {
          await this.#createLock(attempt);
          return () => this.#unlock();
        } catch (err) {
          if (errno(err) !== 'EEXIST')
            throw new AccountsFileError(`cannot lock ACCOUNTS_FILE ${this.path}`, { cause: err });
        }
        const verdict = await this.#breakIfAbandoned();
        if (verdict === 'retry') continue;
        // A lock we cannot check becomes abandoned at a known time: wait for it rather than fail (a
        // container restarted under a new hostname must come up, a few seconds late).
        if (typeof verdict === 'number')
          deadline = Math.min(latest, Math.max(deadline, Date.now() + verdict + 100));
        if (Date.now() > deadline) {
          const holder = await readFile(lockPath, 'utf8').catch(() => '?');
          throw new AccountsFileError(
            `ACCOUNTS_FILE ${this.path} stayed locked by a live process (${lockPath}: ${holder})`,
          );
        }
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 10));
      }
    } finally {
      await rm(attempt, { force: true });
    }
  }

  /** Hard link where the file system has them; else O_EXCL then write (an empty lock is judged by age). */
  async #createLock(attempt: string): Promise<void> {
    if (this.#canLink) {
      try {
        await link(attempt, this.#lockPath);
        return;
      } catch (err) {
        if (!['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EXDEV'].includes(errno(err) ?? '')) throw err;
        this.#canLink = false;
      }
    }
    await writeFile(this.#lockPath, JSON.stringify(SELF), { flag: 'wx', mode: 0o600 });
  }

  async #unlock(): Promise<void> {
    await unlink(this.#lockPath).catch((err: unknown) => {
      if (errno(err) !== 'ENOENT') throw err;
    });
  }

  /**
   * Takes away a lock whose owner is dead (or, when that cannot be checked, that is older than
   * LOCK_STALE_MS). 'retry': try to lock again at once; 'held': a live owner holds it; a number: the
   * owner cannot be checked and the lock counts as abandoned in that many milliseconds.
   */
  async #breakIfAbandoned(): Promise<'retry' | 'held' | number> {
    const lockPath = this.#lockPath;
    let text: string;
    let ino: bigint;
    let ageMs: number;
    try {
      const handle = await open(lockPath, 'r');
      try {
        const s = await handle.stat({ bigint: true });
        ino = s.ino;
        ageMs = Date.now() - Number(s.mtimeMs);
        text = await handle.readFile('utf8');
      } finally {
        await handle.close();
      }
    } catch (err) {
      if (errno(err) === 'ENOENT') return 'retry'; // released meanwhile
      throw new AccountsFileError(`cannot read the lock ${lockPath}`, { cause: err });
    }
    const owner = parseLockOwner(text);
    const state = owner ? lockOwnerState(owner) : 'unknown';
    if (state === 'alive') return 'held';
    if (state === 'unknown' && ageMs <= LOCK_STALE_MS) return LOCK_STALE_MS - ageMs;
    // Move it aside (atomic) and check that what we moved is the lock we judged: another process may
    // have broken it and taken a fresh lock in between, which must then be put back.
    const aside = `${lockPath}.${process.pid}.${randomBytes(4).toString('hex')}.stale`;
    try {
      await rename(lockPath, aside);
    } catch (err) {
      if (errno(err) === 'ENOENT') return 'retry';
      throw new AccountsFileError(`cannot remove the abandoned lock ${lockPath}`, { cause: err });
    }
    try {
      if ((await stat(aside, { bigint: true })).ino !== ino) {
        await link(aside, lockPath).catch(() => undefined);
        return 'held';
      }
      this.#sweep = true;
      return 'retry';
    } finally {
      await rm(aside, { force: true });
    }
  }

  /**
   * Removes what dead writers left beside the file: temp copies of the state (they hold key and
   * password hashes) and lock attempts. Runs under the lock, and state temp files are only written
   * under the lock, so every one found belongs to a writer that died; a lock attempt may be a live
   * process's (waiting for the lock), so it goes only when its process is dead or it is old.
   */
  async #removeLeftovers(): Promise<void> {
    const dir = dirname(this.path);
    const base = basename(this.path).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const stateTemp = new RegExp(`^${base}\\.\\d+\\.[0-9a-f]{8}\\.tmp$`);
    const lockLeftover = new RegExp(`^${base}\\.lock\\.(\\d+)\\.[0-9a-f]{8}\\.(tmp|stale)$`);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      throw new AccountsFileError(`cannot list the directory of ACCOUNTS_FILE ${this.path}`, { cause: err });
    }
    for (const name of names) {
      const file = join(dir, name);
      if (stateTemp.test(name)) {
        await rm(file, { force: true });
        continue;
      }
      const match = lockLeftover.exec(name);
      if (!match) continue;
      const pid = Number(match[1]);
      if (pid === process.pid) continue;
      const old = await stat(file)
        .then((st) => Date.now() - st.mtimeMs > LEFTOVER_MS)
        .catch(() => false);
      if (old || lockOwnerState({ pid, host: SELF.host }) === 'dead') await rm(file, { force: true });
    }
    this.#sweep = false;
  }
}

function sameVersion(a: FileVersion | undefined, b: FileVersion | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs;
}

function parseState(text: string, path: string): State {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new AccountsFileError(`ACCOUNTS_FILE ${path} is not valid JSON`, { cause: err });
  }
  const bad = (what: string) => new AccountsFileError(`ACCOUNTS_FILE ${path}: ${what}`);
  if (typeof raw !== 'object' || raw === null) throw bad('not an object');
  const s = raw as Partial<State>;
  if (s.version !== 1) throw bad(`unknown version ${JSON.stringify(s.version)} (expected 1)`);
  for (const field of ['accounts', 'keys', 'sessions'] as const) {
    if (typeof s[field] !== 'object' || s[field] === null) throw bad(`"${field}" must be an object`);
  }
  for (const [id, a] of Object.entries(s.accounts ?? {})) {
    if (a?.id !== id || typeof a.email !== 'string' || !isAccountTier(a.tier))
      throw bad(`account ${id} is malformed`);
  }
  for (const [id, k] of Object.entries(s.keys ?? {})) {
    if (k?.id !== id || typeof k.hash !== 'string' || typeof k.accountId !== 'string')
      throw bad(`key ${id} is malformed`);
  }
  return s as State;
}

function publicKey(k: StoredKey): ApiKeyRecord {
  const { hash: _hash, ...record } = k;
  return record;
}

function iso(at: Date = new Date()): string {
  return at.toISOString();
}

/**
 * The (oldest) account whose email normalises to `email`. Stored emails are normalised here too, so
 * accounts written before NFKC normalisation (trim + lowercase only) are still found and still block
 * a look-alike sign-up.
 */
function findByEmail(state: State, email: string): Account | undefined {
  let found: Account | undefined;
  for (const a of Object.values(state.accounts)) {
    if (normaliseEmail(a.email) === email && (!found || a.createdAt < found.createdAt)) found = a;
  }
  return found;
}

/** Key-hash → key id, rebuilt only when the state object changes (i.e. after a reload or update). */
const hashIndex = new WeakMap<State, Map<string, string>>();
function keyIdByHash(state: State, hash: string): string | undefined {
  let index = hashIndex.get(state);
  if (!index) {
    index = new Map(Object.values(state.keys).map((k) => [k.hash, k.id]));
    hashIndex.set(state, index);
  }
  return index.get(hash);
}

export class LocalAccountStore implements AccountStore, SessionStore {
  readonly #box: StateBox;

  constructor(box: StateBox) {
    this.#box = box;
  }

  async createAccount(input: NewAccount): Promise<Account> {
    const problem = emailProblem(input.email);
    if (problem) throw new InvalidEmailError(problem);
    const email = normaliseEmail(input.email);
    return this.#box.update((s) => {
      if (findByEmail(s, email)) throw new EmailTakenError(email);
      const account: Account = {
        id: newId('acc_'),
        email,
        tier: input.tier,
        passwordHash: input.passwordHash ?? '',
        createdAt: iso(),
      };
      s.accounts[account.id] = account;
      return { ...account };
    });
  }

  async getAccount(accountId: string): Promise<Account | undefined> {
    const account = (await this.#box.read()).accounts[accountId];
    return account && { ...account };
  }

  async findAccountByEmail(email: string): Promise<Account | undefined> {
    if (emailProblem(email)) return undefined;
    const account = findByEmail(await this.#box.read(), normaliseEmail(email));
    return account && { ...account };
  }

  async listAccounts(): Promise<Account[]> {
    const accounts = Object.values((await this.#box.read()).accounts).map((a) => ({ ...a }));
    return accounts.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  setTier(accountId: string, tier: AccountTier): Promise<Account | undefined> {
    return this.#box.update((s) => {
      const account = s.accounts[accountId];
      if (account) account.tier = tier;
      return account && { ...account };
    });
  }

  setPasswordHash(accountId: string, passwordHash: string): Promise<Account | undefined> {
    return this.#box.update((s) => {
      const account = s.accounts[accountId];
      if (account) account.passwordHash = passwordHash;
      return account && { ...account };
    });
  }

  createKey(accountId: string, opts: { name?: string } = {}): Promise<CreatedKey | undefined> {
    return this.#box.update((s) => {
      if (!s.accounts[accountId]) return undefined;
      const secret = generateApiKey();
      const stored: StoredKey = {
        id: newId('key_'),
        accountId,
        name: opts.name ?? '',
        ...displayParts(secret),
        createdAt: iso(),
        lastUsedAt: null,
        revokedAt: null,
        hash: sha256Hex(secret),
      };
      s.keys[stored.id] = stored;
      return { record: publicKey(stored), secret };
    });
  }

  async listKeys(accountId: string): Promise<ApiKeyRecord[]> {
    const keys = Object.values((await this.#box.read()).keys).filter((k) => k.accountId === accountId);
    return keys.sort((a, b) => b.createdAt.localeCompare(a.createdAt)).map(publicKey);
  }

  async getKey(keyId: string): Promise<ApiKeyRecord | undefined> {
    const key = (await this.#box.read()).keys[keyId];
    return key && publicKey(key);
  }

  revokeKey(keyId: string, accountId?: string): Promise<ApiKeyRecord | undefined> {
    return this.#box.update((s) => {
      const key = s.keys[keyId];
      if (!key || (accountId !== undefined && key.accountId !== accountId)) return undefined;
      key.revokedAt ??= iso();
      return publicKey(key);
    });
  }

  async resolveKey(secret: string): Promise<ResolvedKey | undefined> {
    if (!isValidApiKeyFormat(secret)) return undefined;
    const state = await this.#box.read();
    const keyId = keyIdByHash(state, sha256Hex(secret));
    const key = keyId === undefined ? undefined : state.keys[keyId];
    if (!key || key.revokedAt !== null) return undefined;
    const account = state.accounts[key.accountId];
    return account ? { key: publicKey(key), account: { ...account } } : undefined;
  }

  async touchKey(keyId: string, at: Date = new Date()): Promise<void> {
    await this.#box.update((s) => {
      const key = s.keys[keyId];
      if (key) key.lastUsedAt = iso(at);
    });
  }

  deleteAccount(accountId: string): Promise<boolean> {
    return this.#box.update((s) => {
      if (!s.accounts[accountId]) return false;
      delete s.accounts[accountId];
      for (const [id, key] of Object.entries(s.keys)) if (key.accountId === accountId) delete s.keys[id];
      for (const [hash, session] of Object.entries(s.sessions))
        if (session.accountId === accountId) delete s.sessions[hash];
      return true;
    });
  }

  createSession(accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: string }> {
    const token = generateSessionToken();
    const expiresAt = iso(new Date(Date.now() + ttlMs));
    return this.#box.update((s) => {
      const now = Date.now();
      for (const [hash, session] of Object.entries(s.sessions)) {
        if (Date.parse(session.expiresAt) <= now) delete s.sessions[hash];
      }
      s.sessions[sha256Hex(token)] = { accountId, expiresAt };
      return { token, expiresAt };
    });
  }

  async resolveSession(token: string): Promise<Session | undefined> {
    const session = (await this.#box.read()).sessions[sha256Hex(token)];
    return session && Date.parse(session.expiresAt) > Date.now() ? { ...session } : undefined;
  }

  async deleteSession(token: string): Promise<void> {
    await this.#box.update((s) => {
      delete s.sessions[sha256Hex(token)];
    });
  }

  close(): Promise<void> {
    return this.#box.close();
  }
}

/** Accounts in memory only (tests). */
export function memoryAccountStore(): LocalAccountStore {
  return new LocalAccountStore(new MemoryStateBox());
}

/** Accounts in a JSON file (embedded `npm start`, admin CLI); validates the file now. */
export async function openFileAccountStore(
  path: string,
  opts: FileStoreOptions = {},
): Promise<LocalAccountStore> {
  return new LocalAccountStore(await JsonFileStateBox.open(path, opts));
}
