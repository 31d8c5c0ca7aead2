// Shared budgets (shared-budget.ts) on Redis, shared by every replica. One hash per window — the
// quota windows' layout, `P{share:<budget>}m` and `…d` (redis-layout.ts, one slot: a Cluster runs the
// script too) — holds {w: window start ms, n: the total, m:<member>: each member's count}; it expires
// at its window's end, so a day's hash holds at most that day's members that were counted (no more
// than the day's total). One script checks the total and the member's share in both windows and counts
// all four only if all allow it; Redis TIME is the clock unless a test passes its own.

import type { WindowLimits } from '../../../lib/policy/rules.ts';
import {
  type ShareCharge,
  type SharedBudgetStore,
  type ShareOutcome,
  shareDecision,
  shareLimits,
} from '../shared-budget.ts';
import { LuaScript, type RedisClient } from './redis-connection.ts';
import { RedisLayout } from './redis-layout.ts';

// KEYS[1] minute hash, KEYS[2] day hash. ARGV[1] member field, ARGV[2..5] total per minute, per day,
// share per minute, per day, ARGV[6] the clock in ms or '' for Redis TIME. → {counted (0/1), total
// minute, total day, member minute, member day (all before this call), now ms}.
const CONSUME_SHARE = new LuaScript(`
local now = tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local starts = {now - (now % 60000), now - (now % 86400000)}
local lengths = {60000, 86400000}
local f = ARGV[1]
local c = {}
for i = 1, 2 do
  local v = redis.call('HMGET', KEYS[i], 'w', 'n', f)
  if v[1] and tonumber(v[1]) == starts[i] then
    c[i] = {tonumber(v[2]) or 0, tonumber(v[3]) or 0}
  else
    redis.call('DEL', KEYS[i])
    c[i] = {0, 0}
  end
end
local tm, td, mm, md = c[1][1], c[2][1], c[1][2], c[2][2]
if tm >= tonumber(ARGV[2]) or td >= tonumber(ARGV[3]) or mm >= tonumber(ARGV[4]) or md >= tonumber(ARGV[5]) then
  return {0, tm, td, mm, md, now}
end
for i = 1, 2 do
  redis.call('HSET', KEYS[i], 'w', starts[i])
  redis.call('HINCRBY', KEYS[i], 'n', 1)
  redis.call('HINCRBY', KEYS[i], f, 1)
  redis.call('PEXPIREAT', KEYS[i], starts[i] + lengths[i])
end
return {1, tm, td, mm, md, now}
`);

// KEYS as above. ARGV[1] member field, ARGV[2] the charge's minute start, ARGV[3] its day start.
// Uncounts the total and the member in each window that is still the one the charge was counted in.
const REFUND_SHARE = new LuaScript(`
for i = 1, 2 do
  local v = redis.call('HMGET', KEYS[i], 'w', 'n', ARGV[1])
  if v[1] and tonumber(v[1]) == tonumber(ARGV[i + 1]) then
    if (tonumber(v[2]) or 0) > 0 then redis.call('HINCRBY', KEYS[i], 'n', -1) end
    if (tonumber(v[3]) or 0) > 0 then redis.call('HINCRBY', KEYS[i], ARGV[1], -1) end
  end
end
return 1
`);

export class RedisSharedBudget implements SharedBudgetStore {
  readonly #redis: RedisClient;
  readonly #layout: RedisLayout;
  readonly #now: (() => number) | undefined;

  /** Borrows `redis` (its owner closes it). */
  constructor(redis: RedisClient, keyPrefix: string, now?: () => number) {
    this.#redis = redis;
    this.#layout = new RedisLayout(keyPrefix);
    this.#now = now;
  }

  async consumeShare(
    budget: string,
    member: string,
    total: WindowLimits,
    sharePercent: number,
  ): Promise<ShareOutcome> {
    const share = shareLimits(total, sharePercent);
    const reply = await CONSUME_SHARE.run(this.#redis, this.#keys(budget), [
      `m:${member}`,
      total.perMinute,
      total.perDay,
      share.perMinute,
      share.perDay,
      this.#now === undefined ? '' : String(this.#now()),
    ]);
    if (!Array.isArray(reply) || reply.length !== 6)
      throw new Error(`Unexpected reply from the shared-budget script: ${JSON.stringify(reply)}`);
    const [counted, totalMinute, totalDay, memberMinute, memberDay, now] = reply.map(Number) as number[] as [
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const { allowed, outcome } = shareDecision(
      { totalMinute, totalDay, memberMinute, memberDay },
      total,
      sharePercent,
      now,
    );
    if (allowed !== (counted === 1)) throw new Error('The shared-budget script and its decision disagree');
    if (!allowed) return outcome;
    return {
      ...outcome,
      charge: { budget, member, minuteStart: now - (now % 60_000), dayStart: now - (now % 86_400_000) },
    };
  }

  async refundShare(charge: ShareCharge): Promise<void> {
    await REFUND_SHARE.run(this.#redis, this.#keys(charge.budget), [
      `m:${charge.member}`,
      charge.minuteStart,
      charge.dayStart,
    ]);
  }

  #keys(budget: string): string[] {
    const subject = `share:${budget}`;
    return [this.#layout.minute(subject), this.#layout.day(subject)];
  }
}
