// The key path in one Redis round trip: one script resolves the key (hash → key → not revoked →
// account → tier) and counts the request in the account's windows with that tier's limits, all
// atomically. Same data as RedisAccountStore and RedisQuotaStore (their layouts; no copy, no cache),
// so revocation and tier changes still apply to the very next request.

import type { Redis } from 'ioredis';
import type { WindowLimits } from '../../common/config.ts';
import { ACCOUNT_TIERS, type AccountTier, type ResolvedKey } from '../account-store.ts';
import { hashApiKey, isValidApiKeyFormat } from '../api-keys.ts';
import { accountSubject, type KeyQuota } from '../authorize.ts';
import { outcomeOf, type QuotaOutcome } from '../quota-store.ts';
import { pairs, toAccount, toKey } from './redis-account-store.ts';
import { LuaScript } from './redis-connection.ts';
import {
  chargeKey,
  historyKeyBase,
  outcomeFromReply,
  WINDOWS_LUA,
  windowKeyBase,
} from './redis-quota-store.ts';

// KEYS[1] keyhash. ARGV[1] account-store prefix, ARGV[2] window key base without the account id,
// ARGV[3] '1' to count, '0' to only look (a check that costs nothing), ARGV[4] the charge key or '',
// ARGV[5] the history base without the subject (the account's and the key's days are counted), then
// (tier, per-minute, per-day) triples. Returns {} for an unknown/revoked/orphaned key, else
// {key HGETALL, account HGETALL, windows_consume reply}.
const CONSUME_FOR_KEY = new LuaScript(`${WINDOWS_LUA}
local id = redis.call('GET', KEYS[1])
if not id then return {} end
local kk = ARGV[1] .. 'key:' .. id
local f = redis.call('HMGET', kk, 'accountId', 'revokedAt')
if not f[1] or (f[2] and f[2] ~= '') then return {} end
local ak = ARGV[1] .. 'acct:' .. f[1]
local tier = redis.call('HGET', ak, 'tier')
if not tier then return {} end
for i = 6, #ARGV, 3 do
  if ARGV[i] == tier then
    local base = ARGV[2] .. f[1]
    local hbs = {ARGV[5] .. 'acct:' .. f[1], ARGV[5] .. 'key:' .. id}
    local r = windows_consume(base .. ':m', base .. ':d', tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[3] == '1', ARGV[4], hbs)
    return {redis.call('HGETALL', kk), redis.call('HGETALL', ak), r}
  end
end
return redis.error_reply('account ' .. f[1] .. ' has unknown tier ' .. tier)
`);

export class RedisKeyQuota implements KeyQuota {
  readonly #redis: Redis;
  readonly #prefix: string;

  /** Uses, but does not own, a connection (the quota store's; closed with it). */
  constructor(redis: Redis, keyPrefix: string) {
    this.#redis = redis;
    this.#prefix = keyPrefix;
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
    const args: Array<string | number> = [
      this.#prefix,
      windowKeyBase(this.#prefix, accountSubject('')),
      consume ? '1' : '0',
      requestId === undefined ? '' : chargeKey(this.#prefix, requestId),
      historyKeyBase(this.#prefix, ''),
    ];
    for (const tier of ACCOUNT_TIERS) args.push(tier, tiers[tier].perMinute, tiers[tier].perDay);
    const reply = await CONSUME_FOR_KEY.run(
      this.#redis,
      [`${this.#prefix}keyhash:${hashApiKey(secret)}`],
      args,
    );
    if (!Array.isArray(reply) || reply.length !== 3) return undefined;
    const key = toKey(pairs(reply[0]));
    const account = toAccount(pairs(reply[1]));
    if (!key || !account) throw new Error(`Malformed key or account record for key ${key?.id ?? '?'}`);
    const outcome = outcomeFromReply(reply[2], tiers[account.tier]);
    // A look only reads the counts: turn them into the outcome counting would have had.
    return { resolved: { key, account }, outcome: consume ? outcome : outcomeOf(outcome, Date.now()) };
  }
}
