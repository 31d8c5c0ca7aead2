// k6 quota scenario: exact counts, and the code and headers of every refusal, per tier.
//
//   anonymous  ANON_PER_MINUTE from one IP (all of k6's requests come from 127.0.0.1), then the daily
//              limit ANON_PER_DAY (test-sized) in the next minute
//   free       FREE_PER_MINUTE, then FREE_PER_DAY, with two keys of one account used alternately
//              (quota is per account, not per key)
//   pro        PRO_PER_MINUTE (30), then PRO_PER_DAY (test-sized)
//   revoked    a revoked key, plus a missing, a malformed and an unknown key: always 401/4011, never a
//              quota header, never counted against the anonymous quota of the same IP
//
// Windows are fixed UTC minutes and days, and the scenario runs whenever it is started: it reads the
// server's clock (this machine's: Redis TIME or the embedded server's) just before and just after each
// request, so it knows the minute and the day the request was counted in (exactly, unless the request
// straddled an edge, when the answers of both windows are accepted), and holds every answer to the rule
// for those windows. Phase 1 fills the minute until it refuses (4290); phase 2, in the next minute,
// fills the rest of the day until it refuses (4291): the day's limit holds across minutes.
//
// Every expectation is a check; thresholds require 100 % passed checks and exactly REFUSALS_PER_PHASE
// day refusals per tier, so any wrong count, code or header makes `k6 run` exit non-zero (99).
//
// Run through loadtests/run.ts (starts redis-server and the embedded server, creates the keys).
// Env: BASE_URL, IMAGE (a JPEG path), FREE_KEYS (two keys, comma-separated), PRO_KEY, REVOKED_KEY,
// ANON_PER_MINUTE, ANON_PER_DAY, FREE_PER_MINUTE, FREE_PER_DAY, PRO_PER_MINUTE, PRO_PER_DAY.

import { check, sleep } from 'k6';
import exec from 'k6/execution';
import http from 'k6/http';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL ?? 'http://127.0.0.1:8080';
const IMAGE = open(__ENV.IMAGE, 'b');
// Retry-After is whole seconds, rounded up from the server's instant.
const CLOCK_SLACK_SECONDS = 1;

function intEnv(name) {
  const value = Number(__ENV[name]);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
}

const TIERS = {
  anonymous: { perMinute: intEnv('ANON_PER_MINUTE'), perDay: intEnv('ANON_PER_DAY') },
  free: { perMinute: intEnv('FREE_PER_MINUTE'), perDay: intEnv('FREE_PER_DAY') },
  pro: { perMinute: intEnv('PRO_PER_MINUTE'), perDay: intEnv('PRO_PER_DAY') },
};
for (const [tier, l] of Object.entries(TIERS)) {
  // Phase 2 must fit in one minute: the rest of the day must be below the minute limit.
  if (!(l.perDay > l.perMinute && l.perDay - l.perMinute < l.perMinute))
    throw new Error(`${tier}: need perMinute < perDay < 2 × perMinute, got ${l.perMinute}/${l.perDay}`);
}
const REFUSALS_PER_PHASE = 3;
const REVOKED_ROUNDS = 10;
const FREE_KEYS = (__ENV.FREE_KEYS ?? '').split(',').filter(Boolean);
const PRO_KEY = __ENV.PRO_KEY ?? '';
const REVOKED_KEY = __ENV.REVOKED_KEY ?? '';

const counters = {};
for (const tier of ['anonymous', 'free', 'pro']) {
  counters[tier] = {
    ok: new Counter(`${tier}_ok`),
    minute: new Counter(`${tier}_4290`),
    day: new Counter(`${tier}_4291`),
  };
}
const revoked4011 = new Counter('revoked_4011');
const unexpected = new Counter('unexpected_responses');

const scenario = (exec, startTime = '0s') => ({
  executor: 'per-vu-iterations',
  vus: 1,
  iterations: 1,
  exec,
  startTime,
  maxDuration: '150s',
});

export const options = {
  setupTimeout: '240s',
  scenarios: {
    anonymous: scenario('anonymous'),
    free: scenario('free'),
    pro: scenario('pro'),
    revoked: scenario('revoked'),
  },
  thresholds: {
    checks: ['rate==1'],
    unexpected_responses: ['count==0'],
    anonymous_4291: [`count==${REFUSALS_PER_PHASE}`],
    free_4291: [`count==${REFUSALS_PER_PHASE}`],
    pro_4291: [`count==${REFUSALS_PER_PHASE}`],
    revoked_4011: [`count==${REVOKED_ROUNDS * 2 * 4}`],
  },
  summaryTrendStats: ['min', 'med', 'p(95)', 'max'],
};

// ---- time --------------------------------------------------------------------------------------------

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

function minuteIndex(ms) {
  return Math.floor(ms / MINUTE_MS);
}
function dayIndex(ms) {
  return Math.floor(ms / DAY_MS);
}
function secondsToNextMinute(ms = Date.now()) {
  return (MINUTE_MS - (ms % MINUTE_MS)) / 1000;
}

export function setup() {
  for (const [name, value] of [
    ['FREE_KEYS (two keys)', FREE_KEYS.length === 2],
    ['PRO_KEY', PRO_KEY],
    ['REVOKED_KEY', REVOKED_KEY],
  ]) {
    if (!value) exec.test.abort(`missing ${name}`);
  }
}

// ---- the rule, written by hand -------------------------------------------------------------------------

/** How many of `calls` were served in window `w` (minuteIndex or dayIndex): [surely, at most]. */
function servedIn(calls, windowOf, w) {
  let surely = 0;
  let atMost = 0;
  for (const c of calls) {
    if (!c.served) continue;
    const first = windowOf(c.from);
    const last = windowOf(c.to);
    if (first === w && last === w) surely += 1;
    if (first <= w && w <= last) atMost += 1;
  }
  return [surely, atMost];
}

/**
 * Every answer the rule allows a request sent at `from` and answered at `to`, after `calls`: the day
 * refuses when it has served its limit, else the minute when it has, else the request is served.
 * {code, remaining, reset (s), end (ms, of the refusing window), from, to (its instants in that window)}.
 */
function allowedAnswers(calls, from, to, { perMinute, perDay }) {
  const answers = [];
  for (let m = minuteIndex(from); m <= minuteIndex(to); m += 1) {
    const at = { from: Math.max(from, m * MINUTE_MS), to: Math.min(to, (m + 1) * MINUTE_MS - 1) };
    const d = dayIndex(m * MINUTE_MS);
    const reset = ((d + 1) * DAY_MS) / 1000;
    const [dayLeast, dayMost] = servedIn(calls, dayIndex, d);
    const [minuteLeast, minuteMost] = servedIn(calls, minuteIndex, m);
    for (let used = dayLeast; used <= dayMost; used += 1) {
      if (used >= perDay) {
        answers.push({ code: 4291, remaining: 0, reset, end: (d + 1) * DAY_MS, ...at });
        continue;
      }
      if (minuteMost >= perMinute)
        answers.push({ code: 4290, remaining: perDay - used, reset, end: (m + 1) * MINUTE_MS, ...at });
      if (minuteLeast < perMinute) answers.push({ code: 0, remaining: perDay - used - 1, reset, ...at });
    }
  }
  return answers;
}

/** Whether `res` is the answer `a`: status, code, X-RateLimit-Remaining and -Reset, Retry-After. */
function isAnswer(res, a) {
  const status = a.code === 0 ? 200 : 429;
  if (res.status !== status || body(res).code !== a.code) return false;
  if (res.headers['X-Ratelimit-Remaining'] !== String(a.remaining)) return false;
  if (res.headers['X-Ratelimit-Reset'] !== String(a.reset)) return false;
  if (a.code === 0) return true;
  const raw = res.headers['Retry-After'] ?? '';
  const value = Number(raw);
  const least = Math.max(1, Math.ceil((a.end - a.to) / 1000));
  const most = Math.max(1, Math.ceil((a.end - a.from) / 1000));
  return /^\d+$/.test(raw) && value >= least - CLOCK_SLACK_SECONDS && value <= most + CLOCK_SLACK_SECONDS;
}

// ---- requests and checks -------------------------------------------------------------------------------

function detect(tier, key) {
  const headers = { 'content-type': 'image/jpeg' };
  if (key !== undefined) headers.authorization = `Bearer ${key}`;
  const path = tier === 'anonymous' ? '/api/public/detect' : '/api/open/detect';
  return http.post(`${BASE_URL}${path}`, IMAGE, { headers, tags: { tier } });
}

function body(res) {
  try {
    return JSON.parse(res.body);
  } catch {
    return {};
  }
}

function verify(res, label, checks) {
  const passed = check(res, checks, { label });
  if (!passed) {
    unexpected.add(1);
    const shown = [
      'X-Quota-Tier',
      'X-Ratelimit-Limit',
      'X-Ratelimit-Remaining',
      'X-Ratelimit-Reset',
      'Retry-After',
    ]
      .filter((h) => res.headers[h] !== undefined)
      .map((h) => `${h}: ${res.headers[h]}`)
      .join(', ');
    const why = res.error ? ` (${res.error})` : '';
    console.error(`${label}: HTTP ${res.status}${why} ${String(res.body).slice(0, 120)} [${shown}]`);
  }
  return passed;
}

/** One request of `tier`, held to the rule for the minute and day it was counted in; its code. */
function call(tier, key, calls) {
  const from = Date.now();
  const res = detect(tier, key);
  const to = Date.now();
  const answers = allowedAnswers(calls, from, to, TIERS[tier]);
  const code = body(res).code;
  verify(res, `${tier} request ${calls.length + 1}`, {
    'status, code, X-RateLimit-Remaining, X-RateLimit-Reset and Retry-After as the windows allow': (r) =>
      answers.some((a) => isAnswer(r, a)),
    'X-Quota-Tier': (r) => r.headers['X-Quota-Tier'] === tier,
    'X-RateLimit-Limit is the daily limit': (r) =>
      r.headers['X-Ratelimit-Limit'] === String(TIERS[tier].perDay),
  });
  calls.push({ from, to, served: res.status === 200 });
  if (res.status === 200 && code === 0) counters[tier].ok.add(1);
  if (res.status === 429 && code === 4290) counters[tier].minute.add(1);
  if (res.status === 429 && code === 4291) counters[tier].day.add(1);
  return code;
}

/** Phase 1 until the minute refuses, phase 2 in the next minute until the day refuses. */
function runTier(tier, keyFor) {
  for (const c of Object.values(counters[tier])) c.add(0);
  const { perDay } = TIERS[tier];
  const calls = [];
  const refused = { 4290: 0, 4291: 0 };
  // A server that never refuses must not keep the scenario running.
  const cap = 2 * perDay + 2 * REFUSALS_PER_PHASE;
  let n = 0;
  // The day fills first only if a minute's edge passed within this phase (its limit is under two minutes').
  while (refused[4290] < REFUSALS_PER_PHASE && refused[4291] === 0 && n < cap) {
    const code = call(tier, keyFor(n++), calls);
    if (code in refused) refused[code] += 1;
  }
  sleep(secondsToNextMinute() + 0.1);
  while (refused[4291] < REFUSALS_PER_PHASE && n < cap) {
    const code = call(tier, keyFor(n++), calls);
    if (code in refused) refused[code] += 1;
  }
  const last = calls[calls.length - 1];
  const [least, most] = servedIn(calls, dayIndex, dayIndex(last ? last.to : Date.now()));
  check(null, {
    [`${tier}: refused by the day ${REFUSALS_PER_PHASE} times`]: () => refused[4291] === REFUSALS_PER_PHASE,
    [`${tier}: the day served exactly its limit`]: () => least <= perDay && perDay <= most,
  });
}

export function anonymous() {
  runTier('anonymous', () => undefined);
}

export function free() {
  runTier('free', (n) => FREE_KEYS[n % FREE_KEYS.length]);
}

export function pro() {
  runTier('pro', () => PRO_KEY);
}

// ---- invalid keys ------------------------------------------------------------------------------------------

function expectInvalidKey(label, authorization) {
  const headers = { 'content-type': 'image/jpeg' };
  if (authorization !== undefined) headers.authorization = authorization;
  const res = http.post(`${BASE_URL}/api/open/detect`, IMAGE, { headers, tags: { tier: 'invalid' } });
  verify(res, label, {
    'status 401': (r) => r.status === 401,
    'code 4011': (r) => body(r).code === 4011,
    'no quota headers': (r) =>
      ['X-Quota-Tier', 'X-Ratelimit-Limit', 'X-Ratelimit-Remaining', 'Retry-After'].every(
        (h) => r.headers[h] === undefined,
      ),
  });
  if (res.status === 401 && body(res).code === 4011) revoked4011.add(1);
}

function invalidRound() {
  expectInvalidKey('revoked key', `Bearer ${REVOKED_KEY}`);
  expectInvalidKey('missing key', undefined);
  expectInvalidKey('malformed key', 'Bearer nsk_live_not-a-key');
  expectInvalidKey('unknown key', `Bearer nsk_live_${'0'.repeat(32)}`);
}

// Once while the anonymous quota of this IP is fresh, once after it is used up: always 4011.
export function revoked() {
  revoked4011.add(0);
  for (let i = 0; i < REVOKED_ROUNDS; i += 1) invalidRound();
  sleep(secondsToNextMinute() + 10);
  for (let i = 0; i < REVOKED_ROUNDS; i += 1) invalidRound();
}
