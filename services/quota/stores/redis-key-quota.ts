// The key path: resolve the key (hash → key → not revoked → account → tier) and count the request in
// the account's windows with that tier's limits, the second part atomically in the account's slot
// (redis-layout.ts: an account, its keys and its counters share one). Same data as RedisAccountStore
// and RedisQuotaStore (no copy, no cache), so revocation and tier changes apply to the very next request.
//
// Round trips: a Redis Cluster needs two (GET the key-hash entry, whose slot is the hash's; then the
// script in the account's slot). A single Redis or a Sentinel-managed primary holds every slot, so one
// script does both, naming the account's keys from the entry it reads: the one script here whose keys
// are not all in KEYS, which only one keyspace allows.

import type { WindowLimits } from '../../../lib/policy/rules.ts';
import { ACCOUNT_TIERS, type AccountTier, type ResolvedKey } from '../accounts/account-store.ts';
import { isValidApiKeyFormat, sha256Hex } from '../accounts/api-keys.ts';
import { accountSubject, type KeyQuota, keySubject } from '../authorize.ts';
import { outcomeOf, type QuotaOutcome } from '../quota-store.ts';
import { pairs, parseKeyHashEntry, toAccount, toKey } from './redis-account-store.ts';
import { isCluster, LuaScript, type RedisClient } from './redis-connection.ts';
import { chargeIdFor, chargeKeyOf, RedisLayout } from './redis-layout.ts';
import { outcomeFromReply, PendingCharges, replyNow, WINDOWS_LUA } from './redis-quota-store.ts';

// key_consume(key, acct, minute, day, account history, key history, charge key or '', consume, clock
// (ms, or nil for Redis TIME), first tier argument): {} for a revoked/orphaned key, else {key HGETALL,
// account HGETALL, windows_consume reply}.
const KEY_CONSUME_LUA = `${WINDOWS_LUA}
local function key_consume(kk, ak, mk, dk, hka, hkk, ck, consume, at, tiers)
  local f = redis.call('HMGET', kk, 'accountId', 'revokedAt')
  if not f[1] or (f[2] and f[2] ~= '') then return {} end
  local tier = redis.call('HGET', ak, 'tier')
  if not tier then return {} end
  for i = tiers, #ARGV, 3 do
    if ARGV[i] == tier then
      local r = windows_consume(mk, dk, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), consume, ck, {hka, hkk}, at)
      return {redis.call('HGETALL', kk), redis.call('HGETALL', ak), r}
    end
  end
  return redis.error_reply('account ' .. f[1] .. ' has unknown tier ' .. tier)
end
`;

// Cluster, second step. KEYS: key, acct, minute, day, account history, key history[, charge].
// ARGV[1] '1' to count, '0' to look; ARGV[2] the clock in ms or '' for Redis TIME; then (tier,
// per-minute, per-day) triples.
const CONSUME_IN_ACCOUNT = new LuaScript(`${KEY_CONSUME_LUA}
return key_consume(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7] or '', ARGV[1] == '1', tonumber(ARGV[2]), 3)
`);

// One keyspace, one step. KEYS[1] the key-hash entry. ARGV[1] the key prefix, ARGV[2] '1' to count,
// ARGV[3] the charge key or '', ARGV[4] the clock in ms or '' for Redis TIME, then the tier triples.
// Names as RedisLayout makes them.
const CONSUME_FOR_KEY = new LuaScript(`${KEY_CONSUME_LUA}
local entry = redis.call('GET', KEYS[1])
if not entry then return {} end
local acc, kid = string.match(entry, '^(%S+) (%S+)$')
if not acc then return {} end
local s = ARGV[1] .. '{acct:' .. acc .. '}'
return key_consume(s .. 'key:' .. kid, s .. 'acct', s .. 'm', s .. 'd', s .. 'h', s .. 'h:key:' .. kid, ARGV[3], ARGV[2] == '1', tonumber(ARGV[4]), 5)
`);

export class RedisKeyQuota implements KeyQuota {
  readonly #redis: RedisClient;
  readonly #l: RedisLayout;
  readonly #pending: PendingCharges;
  /** A test's clock; without one the windows follow Redis TIME. */
  readonly #now: (() => number) | undefined;

  /** Uses, but does not own, a connection (the quota store's; closed with it), and the quota store's
   * pending charges (a failed count is refunded there). */
  constructor(redis: RedisClient, keyPrefix: string, pending = new PendingCharges(), now?: () => number) {
    this.#redis = redis;
    this.#l = new RedisLayout(keyPrefix);
    this.#pending = pending;
    this.#now = now;
  }

  consumeForKey(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
    requestId?: string,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined> {
    return this.#run(secret, tiers, true, requestId);
  }

  peekForKey(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined> {
    return this.#run(secret, tiers, false);
  }

  async #run(
    secret: string,
    tiers: Record<AccountTier, WindowLimits>,
    consume: boolean,
    requestId?: string,
  ): Promise<{ resolved: ResolvedKey; outcome: QuotaOutcome } | undefined> {
    if (!isValidApiKeyFormat(secret)) return undefined;
    const tierArgs: Array<string | number> = [];
    for (const tier of ACCOUNT_TIERS) tierArgs.push(tier, tiers[tier].perMinute, tiers[tier].perDay);
    const hashKey = this.#l.keyHash(sha256Hex(secret));
    const counting = consume && requestId !== undefined;
    const clock = this.#now === undefined ? '' : String(this.#now());
    let chargeId: string | undefined;
    let reply: unknown;
    if (isCluster(this.#redis)) {
      const where = parseKeyHashEntry(await this.#redis.get(hashKey));
      if (!where) return undefined;
      const { accountId, keyId } = where;
      const subject = accountSubject(accountId);
      chargeId = counting ? chargeIdFor(requestId, subject) : undefined;
      const keys = [
        this.#l.key(accountId, keyId),
        this.#l.account(accountId),
        this.#l.minute(subject),
        this.#l.day(subject),
        this.#l.history(subject),
        this.#l.history(keySubject(accountId, keyId)),
        ...(chargeId === undefined ? [] : [chargeKeyOf(this.#l, chargeId)]),
      ];
      reply = await this.#pending.track(
        requestId,
        () => ({ chargeId: chargeId as string, counted: keys.slice(2, 6) }),
        () => CONSUME_IN_ACCOUNT.run(this.#redis, keys, [consume ? '1' : '0', clock, ...tierArgs]),
      );
    } else {
      // The account is not known before the script runs: the charge takes the bare request id.
      chargeId = counting ? requestId : undefined;
      reply = await CONSUME_FOR_KEY.run(
        this.#redis,
        [hashKey],
        [
          this.#l.prefix,
          consume ? '1' : '0',
          chargeId === undefined ? '' : chargeKeyOf(this.#l, chargeId),
          clock,
          ...tierArgs,
        ],
      );
    }
    if (!Array.isArray(reply) || reply.length !== 3) return undefined;
    const key = toKey(pairs(reply[0]));
    const account = toAccount(pairs(reply[1]));
    if (!key || !account) throw new Error(`Malformed key or account record for key ${key?.id ?? '?'}`);
    const outcome = outcomeFromReply(reply[2], tiers[account.tier]);
    // A look only reads the counts: turn them into the outcome counting would have had, at the
    // script's instant.
    if (!consume) return { resolved: { key, account }, outcome: outcomeOf(outcome, replyNow(reply[2])) };
    return {
      resolved: { key, account },
      outcome: chargeId === undefined ? outcome : { ...outcome, chargeId },
    };
  }
}
