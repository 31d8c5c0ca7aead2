// `npm run admin -- <command> …`: accounts, API keys and tiers for operators, against the same stores
// the service uses (REDIS_URL → Redis; otherwise the embedded ACCOUNTS_FILE, safe to use while
// `npm start` runs). A key's secret is printed once, at creation; it cannot be shown again.

import { parseArgs } from 'node:util';
import { ConfigError } from '../../lib/common/config.ts';
import { policyInForce } from '../../lib/policy/policy-in-force.ts';
import {
  type Account,
  type AccountStore,
  type ApiKeyRecord,
  EmailTakenError,
  emailProblem,
  InvalidEmailError,
  isAccountTier,
  normaliseEmail,
  StoreWriteError,
} from '../quota/accounts/account-store.ts';
import { maskedKey } from '../quota/accounts/api-keys.ts';
import { accountSubject } from '../quota/authorize.ts';
import { loadQuotaConfig, type QuotaConfig } from '../quota/config.ts';
import { hashPassword, passwordProblem } from '../quota/console/passwords.ts';
import { AccountsFileError } from '../quota/stores/accounts-file-error.ts';
import { openStores, type Stores } from '../quota/stores/open-stores.ts';
import { NotReplicatedError } from '../quota/stores/redis-connection.ts';
import { backupAccountsFile, restoreAccountsFile, StoreInUseError } from '../quota/stores/sqlite-backup.ts';
import { HASH_LIST_HELP, runHashListCommand } from './hash-list-command.ts';
import { PasswordEntryError, readPassword } from './read-password.ts';

const HELP = `Usage: npm run admin -- <command> [options] [--json]

Commands:
  create-account --email <email> [--tier free|pro]   create an account (default tier: free)
  list-accounts                                      all accounts
  issue-key <account> [--name <label>]               create an API key; the secret is printed ONCE
  list-keys <account>                                keys of an account (prefix…last4, created, last used)
  revoke-key <key-id>                                revoke a key (effective on the next request)
  set-tier <account> <free|pro>                      change the tier (effective on the next request)
  usage <account>                                    tier, limits and today's usage
  prune-accounts --unused-days <n>                   delete console sign-ups older than n days that
                                                     never had a key (so never made a request)
  backup <file>                                      embedded store: a consistent copy of ACCOUNTS_FILE,
                                                     taken while the server runs
  restore <file>                                     embedded store: put a backup back (server stopped;
                                                     refused while anything has ACCOUNTS_FILE open)
  set-password <account>                             set (or reset) the console password: the first
                                                     line of stdin, or typed twice at a prompt
${HASH_LIST_HELP}

<account> is an account id (acc_…) or an email address.
Stores: REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES set → Redis (REDIS_KEY_PREFIX); otherwise
ACCOUNTS_FILE (default .data/accounts.json).
--json prints one JSON object on stdout, for scripts.
Exit codes: 0 done; 1 failed (not found, refused, not saved: nothing was changed unless it says so);
2 bad usage or configuration.`;

class UsageError extends Error {}
class NotFound extends Error {}

interface Options {
  json: boolean;
  email?: string;
  tier?: string;
  name?: string;
  unusedDays?: string;
}

function parse(argv: string[]): { command: string | undefined; args: string[]; opts: Options } {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      json: { type: 'boolean', default: false },
      email: { type: 'string' },
      tier: { type: 'string' },
      name: { type: 'string' },
      'unused-days': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) return { command: 'help', args: [], opts: { json: false } };
  const [command, ...args] = positionals;
  return {
    command,
    args,
    opts: {
      json: values.json ?? false,
      email: values.email,
      tier: values.tier,
      name: values.name,
      unusedDays: values['unused-days'],
    },
  };
}

async function findAccount(store: AccountStore, ref: string | undefined): Promise<Account> {
  if (!ref) throw new UsageError('an account id (acc_…) or email is required');
  if (ref.includes('@')) {
    // The stores normalise too; refusing here says why instead of "no account".
    const problem = emailProblem(ref);
    if (problem) throw new UsageError(problem);
  }
  const account = ref.includes('@') ? await store.findAccountByEmail(ref) : await store.getAccount(ref);
  if (!account) throw new NotFound(`no account ${ref}`);
  return account;
}

function tierOf(raw: string | undefined): 'free' | 'pro' {
  if (!isAccountTier(raw)) throw new UsageError(`tier must be free or pro, got ${JSON.stringify(raw)}`);
  return raw;
}

function publicAccount(a: Account) {
  return {
    id: a.id,
    email: a.email,
    tier: a.tier,
    createdAt: a.createdAt,
    consoleLogin: a.passwordHash !== '',
  };
}

function keyLine(k: ApiKeyRecord): string {
  const state = k.revokedAt ? `revoked ${k.revokedAt}` : 'active';
  const name = k.name ? ` "${k.name}"` : '';
  return `${k.id}  ${maskedKey(k)}${name}  created ${k.createdAt}  last used ${k.lastUsedAt ?? 'never'}  ${state}`;
}

/** Runs one command; returns [json, text] for the caller to print. */
async function runCommand(
  stores: Stores,
  config: QuotaConfig,
  command: string | undefined,
  args: string[],
  opts: Options,
): Promise<{ json: unknown; text: string }> {
  const accounts = stores.accountStore;
  switch (command) {
    case 'create-account': {
      const email = opts.email ?? args[0];
      if (!email) throw new UsageError('--email <address> is required');
      // Normalised as everywhere (NFKC, case-folded, trimmed); invisible characters refused.
      const problem = emailProblem(email);
      if (problem) throw new UsageError(problem);
      if (!/^[^@\s]+@[^@\s]+$/.test(normaliseEmail(email)))
        throw new UsageError('--email <address> is required');
      const account = await accounts.createAccount({ email, tier: tierOf(opts.tier ?? 'free') });
      return {
        json: { account: publicAccount(account) },
        text: `created account ${account.id} <${account.email}> tier ${account.tier}`,
      };
    }
    case 'list-accounts': {
      const all = await accounts.listAccounts();
      return {
        json: { accounts: all.map(publicAccount) },
        text: all.length
          ? all.map((a) => `${a.id}  ${a.email}  ${a.tier}  created ${a.createdAt}`).join('\n')
          : 'no accounts',
      };
    }
    case 'issue-key': {
      const account = await findAccount(accounts, args[0] ?? opts.email);
      const created = await accounts.createKey(account.id, { name: opts.name ?? '' });
      if (!created) throw new NotFound(`no account ${account.id}`);
      return {
        json: { key: created.record, secret: created.secret },
        text: [
          `API key ${created.record.id} for ${account.email} (${account.tier}):`,
          '',
          `  ${created.secret}`,
          '',
          'Store it now: it is shown only this once.',
        ].join('\n'),
      };
    }
    case 'list-keys': {
      const account = await findAccount(accounts, args[0] ?? opts.email);
      const keys = await accounts.listKeys(account.id);
      return {
        json: { account: publicAccount(account), keys },
        text: keys.length ? keys.map(keyLine).join('\n') : `no keys for ${account.email}`,
      };
    }
    case 'revoke-key': {
      const keyId = args[0];
      if (!keyId) throw new UsageError('a key id (key_…) is required');
      const key = await accounts.revokeKey(keyId);
      if (!key) throw new NotFound(`no key ${keyId}`);
      return { json: { key }, text: `revoked ${key.id} (${maskedKey(key)}) at ${key.revokedAt}` };
    }
    case 'set-tier': {
      const account = await findAccount(accounts, args[0] ?? opts.email);
      const updated = await accounts.setTier(account.id, tierOf(args[1] ?? opts.tier));
      if (!updated) throw new NotFound(`no account ${account.id}`);
      return {
        json: { account: publicAccount(updated) },
        text: `${updated.email}: tier ${account.tier} → ${updated.tier}`,
      };
    }
    case 'usage': {
      const account = await findAccount(accounts, args[0] ?? opts.email);
      // The limits in force: the mounted policy (POLICY_FILE) when it holds a valid one, as the servers do.
      const policy = policyInForce(config, {
        info: () => undefined,
        error: (obj, msg) => console.error(`nsfwdetector admin: ${msg} (${JSON.stringify(obj)})`),
      });
      const limits = policy.limits().tiers[account.tier];
      policy.close();
      const keys = await accounts.listKeys(account.id);
      const lastUsed =
        keys
          .map((k) => k.lastUsedAt)
          .filter((t): t is string => t !== null)
          .sort()
          .at(-1) ?? null;
      const base = {
        account: publicAccount(account),
        limits,
        keys: {
          active: keys.filter((k) => !k.revokedAt).length,
          revoked: keys.filter((k) => k.revokedAt).length,
        },
        lastUsedAt: lastUsed,
      };
      if (stores.kind !== 'redis') {
        // Embedded counters live in the memory of the running `npm start` process, not in a file.
        const note =
          'usage counters live in the memory of the running embedded server; set REDIS_URL to share and inspect them';
        return {
          json: { ...base, usage: null, note },
          text: `${account.email} (${account.id}) tier ${account.tier}: ${limits.perDay}/day, ${limits.perMinute}/min\nkeys: ${base.keys.active} active, ${base.keys.revoked} revoked; last used ${lastUsed ?? 'never'}\n${note}`,
        };
      }
      const { minute, day } = await stores.quotaStore.peek(accountSubject(account.id), limits);
      const usage = {
        day: {
          used: day.used,
          limit: day.limit,
          remaining: Math.max(0, day.limit - day.used),
          resetAt: day.resetAt,
        },
        minute: { used: minute.used, limit: minute.limit, resetAt: minute.resetAt },
      };
      return {
        json: { ...base, usage },
        text: [
          `${account.email} (${account.id}) tier ${account.tier}`,
          `today:       ${day.used}/${day.limit} used, ${usage.day.remaining} left, resets ${new Date(day.resetAt * 1000).toISOString()}`,
          `this minute: ${minute.used}/${minute.limit}`,
          `keys: ${base.keys.active} active, ${base.keys.revoked} revoked; last used ${lastUsed ?? 'never'}`,
        ].join('\n'),
      };
    }
    case 'prune-accounts': {
      const days = Number(opts.unusedDays);
      if (opts.unusedDays === undefined || !Number.isInteger(days) || days < 1)
        throw new UsageError('--unused-days <n> (a whole number of days, at least 1) is required');
      const before = new Date(Date.now() - days * 86_400_000);
      const pruned = await accounts.pruneUnusedAccounts(before);
      return {
        json: { pruned, createdBefore: before.toISOString() },
        text: `deleted ${pruned} account(s) created before ${before.toISOString()} that never had a key`,
      };
    }
    case 'set-password': {
      const account = await findAccount(accounts, args[0]);
      let password: string;
      try {
        password = await readPassword();
      } catch (err) {
        if (err instanceof PasswordEntryError) throw new UsageError(err.message);
        throw err;
      }
      const problem = passwordProblem(password);
      if (problem) throw new UsageError(problem);
      const updated = await accounts.setPasswordHash(account.id, await hashPassword(password));
      if (!updated) throw new NotFound(`no account ${args[0]}`);
      return {
        json: { account: publicAccount(updated) },
        text: `set the console password of ${updated.id} <${updated.email}>: it can log in to the console`,
      };
    }
    default:
      throw new UsageError(command ? `unknown command ${command}` : 'a command is required');
  }
}

/** The embedded store's file commands (backup, restore): on ACCOUNTS_FILE itself, no store opened. */
async function runFileCommand(
  config: QuotaConfig,
  command: 'backup' | 'restore',
  args: string[],
): Promise<{ json: unknown; text: string }> {
  if (config.redisTarget !== undefined || config.accountsFile === undefined)
    throw new UsageError(
      `${command} copies the embedded store (ACCOUNTS_FILE); with Redis, back up its RDB/AOF files (docs/redis.md)`,
    );
  const file = args[0];
  if (!file) throw new UsageError(`${command} <file> is required`);
  if (command === 'backup') {
    const { accounts, bytes } = await backupAccountsFile(config.accountsFile, file);
    return {
      json: { backup: file, accounts, bytes },
      text: `backed up ${accounts} account(s) from ${config.accountsFile} to ${file} (${bytes} bytes, integrity ok)`,
    };
  }
  const { accounts } = restoreAccountsFile(file, config.accountsFile);
  return {
    json: { restored: file, accounts },
    text: `restored ${accounts} account(s) from ${file} into ${config.accountsFile}`,
  };
}

async function main(argv: string[]): Promise<number> {
  // The hash lists have a store of their own (HASH_LISTS_FILE), not the account store.
  if (argv[0] === 'hash-list') return runHashListCommand(argv.slice(1));
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${HELP}`);
    return 2;
  }
  const { command, args, opts } = parsed;
  if (command === 'help' || command === undefined) {
    console.log(HELP);
    return command === undefined ? 2 : 0;
  }
  let config: QuotaConfig;
  try {
    config = loadQuotaConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`invalid configuration: ${err.message}`);
      return 2;
    }
    throw err;
  }
  if (command === 'backup' || command === 'restore') {
    try {
      const { json, text } = await runFileCommand(config, command, args);
      console.log(opts.json ? JSON.stringify(json, null, 2) : text);
      return 0;
    } catch (err) {
      if (err instanceof UsageError) {
        console.error(`${err.message}\n\n${HELP}`);
        return 2;
      }
      const cause = (err as Error).cause ? ` (${(err as Error).cause})` : '';
      const lead = err instanceof StoreInUseError ? '' : `${command} failed: `;
      console.error(`${lead}${(err as Error).message}${cause}`);
      return 1;
    }
  }
  let stores: Stores;
  try {
    stores = await openStores(config, {
      clientName: 'nsfwdetector-admin',
      required: true,
      waitForRedisMs: 3 * config.redis.connectTimeoutMs,
    });
  } catch (err) {
    const cause = (err as Error).cause ? ` (${(err as Error).cause})` : '';
    console.error(`cannot open the account store: ${(err as Error).message}${cause}`);
    return 1;
  }
  try {
    const { json, text } = await runCommand(stores, config, command, args, opts);
    console.log(opts.json ? JSON.stringify(json, null, 2) : text);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`${err.message}\n\n${HELP}`);
      return 2;
    }
    if (err instanceof NotFound || err instanceof EmailTakenError || err instanceof InvalidEmailError) {
      console.error(err.message);
      return 1;
    }
    if (err instanceof AccountsFileError) {
      console.error(`${err.message}${err.cause ? ` (${err.cause})` : ''}`);
      return 1;
    }
    if (err instanceof StoreWriteError) {
      console.error(`not saved: ${err.message}; nothing was changed`);
      return 1;
    }
    if (err instanceof NotReplicatedError) {
      // Applied on the primary, not yet on enough replicas: a failover now could undo it. Every admin
      // write is safe to repeat (or refuses a repeat visibly: email taken).
      console.error(
        `not confirmed by the replicas: ${err.message}; a failover could undo it: check it (list-accounts, list-keys) and repeat it if missing`,
      );
      return 1;
    }
    throw err;
  } finally {
    await stores.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
