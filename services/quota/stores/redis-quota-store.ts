// QuotaStore on Redis, shared by every replica. One Lua script reads the clock with Redis TIME (one
// clock for all replicas, no skew), checks the minute and the day window, and increments both only if
// both allow it; Redis runs scripts one at a time, so concurrent requests from any number of
// processes are admitted exactly up to the limit. Each window is a small hash {w: window start ms,
// n: count} that expires at its window's end; a stale `w` (expiry not yet run) reads as zero.

import type { Redis } from 'ioredis';
import type { WindowLimits } from '../../common/config.ts';
import {
  CHARGE_TTL_MS,
  DAY_MS,
  type DayUsage,
  HISTORY_DAYS,
  historyDays,
  type QuotaOutcome,
  type QuotaStore,
  retryAfterSeconds,
  type WindowState,
  windowsAt,
} from '../quota-store.ts';
import { closeRedis, LuaScript } from './redis-connection.ts';

/**
 * Lua: `windows_consume(minuteKey, dayKey, perMinute, perDay, consume, chargeKey)` → {refused (0 none,
 * 1 minute, 2 day, 3 cancelled), minute count, day count, now ms}. Clock: Redis TIME. Counts both
 * windows only if both allow it; each window key is a hash {w: window start ms, n: count} expiring at
 * its window's end. With a chargeKey (non-empty) the charge is recorded there — which windows it
 * counted, {m, ms, d, ds} — for REFUND_LUA; a chargeKey that already exists means this request was
 * refunded before it ran (its caller timed out) or is a repeat: nothing is counted (3). Shared by
 * every script that counts (this store's, and RedisKeyQuota's key-and-count script).
 */
export const WINDOWS_LUA = `
local function windows_consume(mk, dk, perMinute, perDay, consume, ck, hbs)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
  local hks = {}
  for i, hb in ipairs(hbs or {}) do hks[i] = hb .. ':' .. string.format('%d', dayStart / 86400000) end
  local function note(field)
    for _, hk in ipairs(hks) do
      redis.call('HINCRBY', hk, field, 1)
      redis.call('PEXPIREAT', hk, dayStart + ${HISTORY_DAYS * DAY_MS})
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
    redis.call('HSET', ck, 'm', mk, 'ms', minuteStart, 'd', dk, 'ds', dayStart, 'h', table.concat(hks, '\\n'))
    redis.call('PEXPIRE', ck, ${CHARGE_TTL_MS})
  end
  return {0, m, d, now}
end
`;

// KEYS[1] the charge key. Uncounts the windows recorded there if they are still the current ones (a
// minute that has rolled over is left alone), once; with no record yet, leaves a tombstone so that
// the consume, should it still arrive, counts nothing. Returns 1 when it uncounted, else 0.
const REFUND = new LuaScript(`
local v = redis.call('HMGET', KEYS[1], 'm', 'ms', 'd', 'ds', 'r', 'h')
if v[5] then return 0 end
local done = 0
-- The served count of the day's history (account and key) is uncounted too: a 503 was never served.
if v[6] then
  for hk in string.gmatch(v[6], '[^\\n]+') do
    if (tonumber(redis.call('HGET', hk, 's')) or 0) > 0 then redis.call('HINCRBY', hk, 's', -1) end
  end
end
if v[1] then
  for _, pair in ipairs({{v[1], v[2]}, {v[3], v[4]}}) do
    local h = redis.call('HMGET', pair[1], 'w', 'n')
    if h[1] and tonumber(h[1]) == tonumber(pair[2]) and (tonumber(h[2]) or 0) > 0 then
      redis.call('HINCRBY', pair[1], 'n', -1)
      done = 1
    end
  end
end
redis.call('HSET', KEYS[1], 'r', '1')
redis.call('PEXPIRE', KEYS[1], ${CHARGE_TTL_MS})
return done
`);

/** Key of the charge record of a request. */
export function chargeKey(prefix: string, requestId: string): string {
  return `${prefix}charge:${requestId}`;
}

// KEYS[1] minute window, KEYS[2] day window. ARGV[1] per-minute limit, ARGV[2] per-day limit,
// ARGV[3] '1' to consume, '0' to peek, ARGV[4] the charge key or '', then the history bases.
const CONSUME = new LuaScript(`${WINDOWS_LUA}
local hbs = {}
for i = 5, #ARGV do hbs[#hbs + 1] = ARGV[i] end
return windows_consume(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4], hbs)
`);

/**
 * Base of a history subject's per-day counters: hashes `<base>:<UTC day number>` {s: served,
 * r: refused}, each expiring HISTORY_DAYS after its day began (compact: one small hash a day).
 */
export function historyKeyBase(prefix: string, subject: string): string {
  return `${prefix}h:${subject}`;
}

/** Key names of a subject's windows: `<base>:m` and `<base>:d`. */
export function windowKeyBase(prefix: string, subject: string): string {
  return `${prefix}q:${subject}`;
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
  const refusedBy = refused === 2 ? 'day' : 'minute';
  const end = (refusedBy === 'day' ? state.day.resetAt : state.minute.resetAt) * 1000;
  return { allowed: false, refusedBy, retryAfterSeconds: retryAfterSeconds(now, end), ...state };
}

// KEYS[1] device counter. Counts one request for the current UTC day.
const TRACK_DEVICE = new LuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dayStart = now - (now % 86400000)
local v = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 1
if v[1] and tonumber(v[1]) == dayStart then n = (tonumber(v[2]) or 0) + 1 end
redis.call('HSET', KEYS[1], 'w', dayStart, 'n', n)
redis.call('PEXPIREAT', KEYS[1], dayStart + 86400000)
return n
`);

/** Waits before each further refund attempt: a refund is idempotent, so trying again is safe. */
const REFUND_RETRY_DELAYS_MS = [20, 100, 500, 2000];

export class RedisQuotaStore implements QuotaStore {
  readonly #redis: Redis;
  readonly #prefix: string;
  readonly #refunding = new Set<Promise<void>>();

  /** Takes ownership of the connection (closed by `close`). */
  constructor(redis: Redis, keyPrefix: string) {
    this.#redis = redis;
    this.#prefix = keyPrefix;
  }

  async consume(
    subject: string,
    limits: WindowLimits,
    requestId?: string,
    history: readonly string[] = [],
  ): Promise<QuotaOutcome> {
    return outcomeFromReply(await this.#run(subject, limits, true, requestId, history), limits);
  }

  async history(subject: string, days: number): Promise<DayUsage[]> {
    const base = historyKeyBase(this.#prefix, subject);
    const list = historyDays(Date.now(), days);
    const pipeline = this.#redis.pipeline();
    for (const { dayStart } of list) pipeline.hmget(`${base}:${dayStart / DAY_MS}`, 's', 'r');
    const replies = (await pipeline.exec()) ?? [];
    return list.map(({ day }, i) => {
      const [err, v] = replies[i] ?? [null, []];
      if (err) throw err;
      const [s, r] = (v as (string | null)[]) ?? [];
      return { day, served: Number(s ?? 0), refused: Number(r ?? 0) };
    });
  }

  // A refund that times out has usually run anyway (the same connection delivers commands in order,
  // so it runs after its consume); it is retried until one attempt is answered, then given up.
  refund(requestId: string): Promise<void> {
    const attempt = async () => {
      for (let i = 0; ; i++) {
        try {
          await REFUND.run(this.#redis, [chargeKey(this.#prefix, requestId)], []);
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
    await TRACK_DEVICE.run(this.#redis, [`${this.#prefix}dev:${deviceId}`], []);
  }

  /** Requests seen today from a device id (tests, abuse reports). */
  async deviceCount(deviceId: string): Promise<number> {
    const [w, n] = await this.#redis.hmget(`${this.#prefix}dev:${deviceId}`, 'w', 'n');
    return Number(w) === windowsAt(Date.now()).dayStart ? Number(n) : 0;
  }

  /** Waits for refunds still being tried (a shutdown must not drop them), then closes. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#refunding]);
    return closeRedis(this.#redis);
  }

  #run(
    subject: string,
    limits: WindowLimits,
    consume: boolean,
    requestId?: string,
    history: readonly string[] = [],
  ): Promise<unknown> {
    const base = windowKeyBase(this.#prefix, subject);
    return CONSUME.run(
      this.#redis,
      [`${base}:m`, `${base}:d`],
      [
        limits.perMinute,
        limits.perDay,
        consume ? '1' : '0',
        requestId === undefined ? '' : chargeKey(this.#prefix, requestId),
        ...history.map((h) => historyKeyBase(this.#prefix, h)),
      ],
    );
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
