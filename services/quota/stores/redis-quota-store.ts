// QuotaStore on Redis, shared by every replica. One Lua script reads the clock with Redis TIME (one
// clock for all replicas, no skew; a test may pass its own clock instead), checks the minute and the day window, and increments both only if
// both allow it; Redis runs scripts one at a time, so concurrent requests from any number of
// processes are admitted exactly up to the limit. Each window is a small hash {w: window start ms,
// n: count} that expires at its window's end; a stale `w` (expiry not yet run) reads as zero. Every key
// a script touches is in its KEYS and in the subject's hash slot (redis-layout.ts), the charge record
// included, so the same scripts run on a Redis Cluster.

import type { WindowLimits } from '../../../lib/policy/rules.ts';
import {
  CHARGE_TTL_MS,
  DAY_MS,
  type DayUsage,
  HISTORY_DAYS,
  historyDays,
  type QuotaOutcome,
  type QuotaStore,
  refusal,
  type WindowState,
  windowsAt,
} from '../quota-store.ts';
import type { ShareCharge, SharedBudgetStore, ShareOutcome } from '../shared-budget.ts';
import { closeRedis, isCluster, LuaScript, type RedisClient } from './redis-connection.ts';
import { chargeIdFor, chargeKeyOf, prepareSlotTags, RedisLayout } from './redis-layout.ts';
import { RedisSharedBudget } from './redis-shared-budget.ts';

/**
 * Lua: `windows_consume(minuteKey, dayKey, perMinute, perDay, consume, chargeKey, historyKeys, at)` →
 * {refused (0 none, 1 minute, 2 day, 3 cancelled), minute count, day count, now ms}. Clock: `at` (ms)
 * when given, else Redis TIME. Counts both windows only if both allow it; each window key is a hash {w: window start ms, n:
 * count} expiring at its window's end. With a chargeKey (non-empty) the charge is recorded there —
 * which windows and history hashes it counted, {m, ms, d, ds, h, hd} — for the refund; a chargeKey
 * that already exists means this request was refunded before it ran (its caller timed out) or is a
 * repeat: nothing is counted (3). A history hash holds `s:<day>` (served) and `r:<day>` (refused) for
 * the last HISTORY_DAYS UTC days; older fields are dropped when the day changes, and the hash expires
 * when no request came for that long. Shared by every script that counts.
 */
export const WINDOWS_LUA = `
local function windows_consume(mk, dk, perMinute, perDay, consume, ck, hks, at)
  local now = at
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local minuteStart = now - (now % 60000)
  local dayStart = now - (now % 86400000)
  local function count(key, start)
    local v = redis.call('HMGET', key, 'w', 'n')
    if v[1] and tonumber(v[1]) == start then return tonumber(v[2]) or 0 end
    return 0
  end
  local m = count(mk, minuteStart)
  local d = count(dk, dayStart)
  if not consume then return {0, m, d, now} end
  if ck ~= '' and redis.call('EXISTS', ck) == 1 then return {3, m, d, now} end
  local day = math.floor(dayStart / 86400000)
  local function note(field)
    for _, hk in ipairs(hks) do
      local last = tonumber(redis.call('HGET', hk, 'last'))
      if last ~= day then
        if last then
          for old = last - ${HISTORY_DAYS} + 1, math.min(last, day - ${HISTORY_DAYS}) do
            redis.call('HDEL', hk, 's:' .. old, 'r:' .. old)
          end
        end
        redis.call('HSET', hk, 'last', day)
        redis.call('PEXPIREAT', hk, dayStart + ${HISTORY_DAYS * DAY_MS})
      end
      redis.call('HINCRBY', hk, field .. ':' .. day, 1)
    end
  end
  if d >= perDay then note('r') return {2, m, d, now} end
  if m >= perMinute then note('r') return {1, m, d, now} end
  note('s')
  m = m + 1
  d = d + 1
  redis.call('HSET', mk, 'w', minuteStart, 'n', m)
  redis.call('PEXPIREAT', mk, minuteStart + 60000)
  redis.call('HSET', dk, 'w', dayStart, 'n', d)
  redis.call('PEXPIREAT', dk, dayStart + 86400000)
  if ck ~= '' then
    redis.call('HSET', ck, 'm', mk, 'ms', minuteStart, 'd', dk, 'ds', dayStart, 'h', table.concat(hks, '\\n'), 'hd', day)
    redis.call('PEXPIRE', ck, ${CHARGE_TTL_MS})
  end
  return {0, m, d, now}
end
`;

// KEYS[1] the charge key, then the keys it counted (minute, day, history hashes) when the caller knows
// them. ARGV[1] '1' where a script may touch only the keys it is given (a Cluster). Uncounts the
// windows recorded if they are still the current ones (a minute that has rolled over is left alone)
// and the served count of the day's history (a 503 was never served), once; with no record yet,
// leaves a tombstone so that the consume, should it still arrive, counts nothing. Without the keys on
// one keyspace it takes their names from the record; in a Cluster it answers -1 (read the record and
// call again with them). Returns 1 when it uncounted, else 0.
const REFUND = new LuaScript(`
local v = redis.call('HMGET', KEYS[1], 'm', 'ms', 'd', 'ds', 'r', 'h', 'hd')
if v[5] then return 0 end
if not v[1] then
  redis.call('HSET', KEYS[1], 'r', '1')
  redis.call('PEXPIRE', KEYS[1], ${CHARGE_TTL_MS})
  return 0
end
local m, d, hks = KEYS[2], KEYS[3], {}
if not m then
  if ARGV[1] == '1' then return -1 end
  m, d = v[1], v[3]
  for hk in string.gmatch(v[6] or '', '[^\\n]+') do hks[#hks + 1] = hk end
else
  for i = 4, #KEYS do hks[#hks + 1] = KEYS[i] end
end
local done = 0
for _, hk in ipairs(hks) do
  local f = 's:' .. v[7]
  if (tonumber(redis.call('HGET', hk, f)) or 0) > 0 then redis.call('HINCRBY', hk, f, -1) end
end
for _, pair in ipairs({{m, v[2]}, {d, v[4]}}) do
  local h = redis.call('HMGET', pair[1], 'w', 'n')
  if h[1] and tonumber(h[1]) == tonumber(pair[2]) and (tonumber(h[2]) or 0) > 0 then
    redis.call('HINCRBY', pair[1], 'n', -1)
    done = 1
  end
end
redis.call('HSET', KEYS[1], 'r', '1')
redis.call('PEXPIRE', KEYS[1], ${CHARGE_TTL_MS})
return done
`);

// KEYS: minute window, day window, the charge key (when ARGV[4] is '1'), then the history hashes.
// ARGV[1] per-minute limit, ARGV[2] per-day limit, ARGV[3] '1' to consume, '0' to peek, ARGV[5] the
// clock in ms or '' for Redis TIME.
const CONSUME = new LuaScript(`${WINDOWS_LUA}
local at = nil
if ARGV[5] ~= '' then at = tonumber(ARGV[5]) end
local ck = ''
local first = 3
if ARGV[4] == '1' then ck = KEYS[3] first = 4 end
local hks = {}
for i = first, #KEYS do hks[#hks + 1] = KEYS[i] end
return windows_consume(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', ck, hks, at)
`);

/** The instant (ms) at which a `windows_consume` reply was computed. */
export function replyNow(reply: unknown): number {
  return Number((reply as unknown[])[3]);
}

/** A `windows_consume` reply as the QuotaStore contract's outcome. */
export function outcomeFromReply(reply: unknown, limits: WindowLimits): QuotaOutcome {
  if (!Array.isArray(reply) || reply.length !== 4) {
    throw new Error(`Unexpected reply from the quota script: ${JSON.stringify(reply)}`);
  }
  const [refused, m, d, now] = reply.map(Number) as [number, number, number, number];
  if (refused === 3) throw new Error('This request was already counted or refunded');
  const state = windows(m, d, now, limits);
  if (refused === 0) return { allowed: true, ...state };
  return refusal(refused === 2 ? 'day' : 'minute', state, now);
}

// KEYS[1] device counter. ARGV[1] the clock in ms or '' for Redis TIME. Counts one request for the
// current UTC day.
const TRACK_DEVICE = new LuaScript(`
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local dayStart = now - (now % 86400000)
local v = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 1
if v[1] and tonumber(v[1]) == dayStart then n = (tonumber(v[2]) or 0) + 1 end
redis.call('HSET', KEYS[1], 'w', dayStart, 'n', n)
redis.call('PEXPIREAT', KEYS[1], dayStart + 86400000)
return n
`);

/** What a refund needs: the charge id, and the keys the charge counted when they are known. */
export interface PendingCharge {
  chargeId: string;
  counted?: string[];
}

/**
 * The charges of consumes that failed (timed out: they may still run), by request id: the authorizer
 * refunds such a request by its bare request id, at once, before any charge id was handed out; with
 * the keys known, that refund is one script. Shared by the quota store and the key path. Entries go
 * with their refund, or after a while.
 */
export class PendingCharges {
  readonly #byRequest = new Map<string, PendingCharge>();

  /** Runs a consume whose charge is `charge`; remembers it if the consume fails. */
  async track<T>(
    requestId: string | undefined,
    charge: () => PendingCharge,
    consume: () => Promise<T>,
  ): Promise<T> {
    try {
      return await consume();
    } catch (err) {
      if (requestId !== undefined) {
        this.#byRequest.set(requestId, charge());
        setTimeout(() => this.#byRequest.delete(requestId), CHARGE_TTL_MS).unref();
      }
      throw err;
    }
  }

  /** The charge for a refund by charge id, or by the bare request id of a failed consume. */
  take(id: string): PendingCharge {
    const charge = this.#byRequest.get(id);
    if (charge === undefined) return { chargeId: id };
    this.#byRequest.delete(id);
    return charge;
  }
}

/** Waits before each further refund attempt: a refund is idempotent, so trying again is safe. */
const REFUND_RETRY_DELAYS_MS = [20, 100, 500, 2000];

export class RedisQuotaStore implements QuotaStore, SharedBudgetStore {
  readonly #redis: RedisClient;
  readonly #layout: RedisLayout;
  readonly #pending: PendingCharges;
  readonly #refunding = new Set<Promise<void>>();
  /** A test's clock; without one the windows follow Redis TIME. */
  readonly #now: (() => number) | undefined;
  readonly #shared: RedisSharedBudget;

  /** Takes ownership of the connection (closed by `close`). */
  constructor(redis: RedisClient, keyPrefix: string, pending = new PendingCharges(), now?: () => number) {
    this.#redis = redis;
    this.#layout = new RedisLayout(keyPrefix);
    this.#pending = pending;
    this.#now = now;
    this.#shared = new RedisSharedBudget(redis, keyPrefix, now);
    prepareSlotTags();
  }

  consumeShare(
    budget: string,
    member: string,
    total: WindowLimits,
    sharePercent: number,
  ): Promise<ShareOutcome> {
    return this.#shared.consumeShare(budget, member, total, sharePercent);
  }

  refundShare(charge: ShareCharge): Promise<void> {
    return this.#shared.refundShare(charge);
  }

  async consume(
    subject: string,
    limits: WindowLimits,
    requestId?: string,
    history: readonly string[] = [],
  ): Promise<QuotaOutcome> {
    const chargeId = requestId === undefined ? undefined : chargeIdFor(requestId, subject);
    const reply = await this.#pending.track(
      requestId,
      () => ({ chargeId: chargeId as string, counted: this.#counted(subject, history) }),
      () => this.#run(subject, limits, true, chargeId, history),
    );
    const outcome = outcomeFromReply(reply, limits);
    return chargeId === undefined ? outcome : { ...outcome, chargeId };
  }

  async history(subject: string, days: number): Promise<DayUsage[]> {
    const list = historyDays(this.#now?.() ?? Date.now(), days);
    const fields = list.flatMap(({ dayStart }) => [`s:${dayStart / DAY_MS}`, `r:${dayStart / DAY_MS}`]);
    const v = await this.#redis.hmget(this.#layout.history(subject), ...fields);
    return list.map(({ day }, i) => ({
      day,
      served: Number(v[2 * i] ?? 0),
      refused: Number(v[2 * i + 1] ?? 0),
    }));
  }

  // One script (a refund that times out has usually run anyway: the same connection delivers commands
  // in order, so it runs after its consume), retried until one attempt is answered, then given up;
  // idempotent. In a Cluster a refund by charge id first reads the record for the keys it names.
  refund(id: string): Promise<void> {
    const { chargeId, counted } = this.#pending.take(id);
    const chargeKey = chargeKeyOf(this.#layout, chargeId);
    const attempt = async () => {
      for (let i = 0; ; i++) {
        try {
          await this.#refundOnce(chargeKey, counted);
          return;
        } catch (err) {
          const delay = REFUND_RETRY_DELAYS_MS[i];
          if (delay === undefined) throw err;
          await new Promise((resolve) => setTimeout(resolve, delay));
        }
      }
    };
    const running = attempt();
    this.#refunding.add(running);
    const forget = () => this.#refunding.delete(running);
    running.then(forget, forget);
    return running;
  }

  async peek(subject: string, limits: WindowLimits): Promise<{ minute: WindowState; day: WindowState }> {
    const { minute, day } = outcomeFromReply(await this.#run(subject, limits, false), limits);
    return { minute, day };
  }

  async trackDevice(deviceId: string): Promise<void> {
    await TRACK_DEVICE.run(this.#redis, [this.#layout.device(deviceId)], [this.#clockArg()]);
  }

  /** Requests seen today from a device id (tests, abuse reports). */
  async deviceCount(deviceId: string): Promise<number> {
    const [w, n] = await this.#redis.hmget(this.#layout.device(deviceId), 'w', 'n');
    return Number(w) === windowsAt(this.#now?.() ?? Date.now()).dayStart ? Number(n) : 0;
  }

  /** Waits for refunds still being tried (a shutdown must not drop them), then closes. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#refunding]);
    return closeRedis(this.#redis);
  }

  async #refundOnce(chargeKey: string, counted?: string[]): Promise<void> {
    const strict = isCluster(this.#redis) ? '1' : '0';
    if (counted) {
      await REFUND.run(this.#redis, [chargeKey, ...counted], [strict]);
      return;
    }
    if ((await REFUND.run(this.#redis, [chargeKey], [strict])) !== -1) return;
    const [m, d, h] = await this.#redis.hmget(chargeKey, 'm', 'd', 'h');
    if (!m || !d) return;
    await REFUND.run(this.#redis, [chargeKey, m, d, ...(h ? h.split('\n') : [])], [strict]);
  }

  /** The keys a consume of `subject` with `history` counts (minute, day, history hashes). */
  #counted(subject: string, history: readonly string[]): string[] {
    return [
      this.#layout.minute(subject),
      this.#layout.day(subject),
      ...history.map((h) => this.#layout.history(h)),
    ];
  }

  #run(
    subject: string,
    limits: WindowLimits,
    consume: boolean,
    chargeId?: string,
    history: readonly string[] = [],
  ): Promise<unknown> {
    const chargeKey = chargeId === undefined ? [] : [chargeKeyOf(this.#layout, chargeId)];
    return CONSUME.run(
      this.#redis,
      [
        this.#layout.minute(subject),
        this.#layout.day(subject),
        ...chargeKey,
        ...history.map((h) => this.#layout.history(h)),
      ],
      [limits.perMinute, limits.perDay, consume ? '1' : '0', chargeKey.length ? '1' : '0', this.#clockArg()],
    );
  }

  #clockArg(): string {
    return this.#now === undefined ? '' : String(this.#now());
  }
}

function windows(
  minuteUsed: number,
  dayUsed: number,
  nowMs: number,
  limits: WindowLimits,
): { minute: WindowState; day: WindowState } {
  const { minuteEnd, dayEnd } = windowsAt(nowMs);
  return {
    minute: { used: minuteUsed, limit: limits.perMinute, resetAt: minuteEnd / 1000 },
    day: { used: dayUsed, limit: limits.perDay, resetAt: dayEnd / 1000 },
  };
}
