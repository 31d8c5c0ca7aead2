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
// Windows are fixed UTC minutes: setup() waits until at least MIN_SECONDS_LEFT remain in the current
// minute, phase 1 (fill the minute, then be refused with 4290) must finish inside that minute (checked),
// phase 2 starts just after the next minute boundary (rest of the day, then 4291).
//
// Every expectation is a check; thresholds require 100 % passed checks and the exact count of each
// outcome, so any wrong count, code or header makes `k6 run` exit non-zero (99).
//
// Run through loadtests/run.ts (starts redis-server and the embedded server, creates the keys).
// Env: BASE_URL, IMAGE (a JPEG path), FREE_KEYS (two keys, comma-separated), PRO_KEY, REVOKED_KEY,
// ANON_PER_MINUTE, ANON_PER_DAY, FREE_PER_MINUTE, FREE_PER_DAY, PRO_PER_MINUTE, PRO_PER_DAY.

import { check, fail, sleep } from 'k6';
import exec from 'k6/execution';
import http from 'k6/http';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL ?? 'http://127.0.0.1:8080';
const IMAGE = open(__ENV.IMAGE, 'b');
const MIN_SECONDS_LEFT = Number(__ENV.MIN_SECONDS_LEFT ?? 25);
// Retry-After and the client's own clock may differ by rounding and request time.
const CLOCK_SLACK_SECONDS = 2;

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
    anonymous_ok: [`count==${TIERS.anonymous.perDay}`],
    anonymous_4290: [`count==${REFUSALS_PER_PHASE}`],
    anonymous_4291: [`count==${REFUSALS_PER_PHASE}`],
    free_ok: [`count==${TIERS.free.perDay}`],
    free_4290: [`count==${REFUSALS_PER_PHASE}`],
    free_4291: [`count==${REFUSALS_PER_PHASE}`],
    pro_ok: [`count==${TIERS.pro.perDay}`],
    pro_4290: [`count==${REFUSALS_PER_PHASE}`],
    pro_4291: [`count==${REFUSALS_PER_PHASE}`],
    revoked_4011: [`count==${REVOKED_ROUNDS * 2 * 4}`],
  },
  summaryTrendStats: ['min', 'med', 'p(95)', 'max'],
};

// ---- time --------------------------------------------------------------------------------------------

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

function minuteIndex(ms = Date.now()) {
  return Math.floor(ms / MINUTE_MS);
}
function secondsToNextMinute(ms = Date.now()) {
  return (MINUTE_MS - (ms % MINUTE_MS)) / 1000;
}
function nextMidnightSeconds(ms = Date.now()) {
  return (Math.floor(ms / DAY_MS) + 1) * (DAY_MS / 1000);
}

export function setup() {
  for (const [name, value] of [
    ['FREE_KEYS (two keys)', FREE_KEYS.length === 2],
    ['PRO_KEY', PRO_KEY],
    ['REVOKED_KEY', REVOKED_KEY],
  ]) {
    if (!value) exec.test.abort(`missing ${name}`);
  }
  // Never straddle UTC midnight: the daily windows would reset under the test.
  const toMidnight = nextMidnightSeconds() - Date.now() / 1000;
  if (toMidnight < 150) {
    console.log(`waiting ${Math.ceil(toMidnight)} s for UTC midnight to pass`);
    sleep(toMidnight + 1);
  }
  const left = secondsToNextMinute();
  if (left < MIN_SECONDS_LEFT) {
    console.log(`only ${left.toFixed(1)} s left in this minute; waiting for the next one`);
    sleep(left + 0.5);
  }
  return { phase1Minute: minuteIndex() };
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

function quotaHeaders(tier, limit, remaining) {
  return {
    'X-Quota-Tier': (r) => r.headers['X-Quota-Tier'] === tier,
    'X-RateLimit-Limit': (r) => r.headers['X-Ratelimit-Limit'] === String(limit),
    'X-RateLimit-Remaining': (r) => r.headers['X-Ratelimit-Remaining'] === String(remaining),
    'X-RateLimit-Reset is the next UTC midnight': (r) =>
      r.headers['X-Ratelimit-Reset'] === String(nextMidnightSeconds()),
  };
}

function expectOk(tier, key, remaining) {
  const res = detect(tier, key);
  const ok = verify(res, `${tier} allowed (remaining ${remaining})`, {
    'status 200': (r) => r.status === 200,
    'code 0': (r) => body(r).code === 0,
    ...quotaHeaders(tier, TIERS[tier].perDay, remaining),
  });
  if (res.status === 200) counters[tier].ok.add(1);
  return ok;
}

function expectRefused(tier, key, window, remaining) {
  const res = detect(tier, key);
  const code = window === 'minute' ? 4290 : 4291;
  const secondsLeft = window === 'minute' ? secondsToNextMinute() : nextMidnightSeconds() - Date.now() / 1000;
  verify(res, `${tier} refused by the ${window}`, {
    'status 429': (r) => r.status === 429,
    [`code ${code}`]: (r) => body(r).code === code,
    'Retry-After: whole seconds until the window resets': (r) => {
      const raw = r.headers['Retry-After'];
      const value = Number(raw);
      return (
        /^\d+$/.test(raw ?? '') &&
        value >= 1 &&
        Math.abs(value - Math.ceil(secondsLeft)) <= CLOCK_SLACK_SECONDS
      );
    },
    ...quotaHeaders(tier, TIERS[tier].perDay, remaining),
  });
  if (res.status === 429 && body(res).code === 4290) counters[tier].minute.add(1);
  if (res.status === 429 && body(res).code === 4291) counters[tier].day.add(1);
}

/** Phase 1 in the setup minute, phase 2 just after the next boundary. */
function runTier(tier, data, keyFor) {
  for (const c of Object.values(counters[tier])) c.add(0);
  const { perMinute, perDay } = TIERS[tier];
  let n = 0;
  for (let i = 1; i <= perMinute; i += 1) expectOk(tier, keyFor(n++), perDay - i);
  for (let i = 0; i < REFUSALS_PER_PHASE; i += 1)
    expectRefused(tier, keyFor(n++), 'minute', perDay - perMinute);
  check(minuteIndex(), {
    [`${tier} phase 1 stayed inside one UTC minute`]: (m) => m === data.phase1Minute,
  }) || fail(`${tier}: phase 1 crossed a minute boundary; the machine is too slow for MIN_SECONDS_LEFT`);

  sleep(secondsToNextMinute() + 1);
  for (let i = perMinute + 1; i <= perDay; i += 1) expectOk(tier, keyFor(n++), perDay - i);
  for (let i = 0; i < REFUSALS_PER_PHASE; i += 1) expectRefused(tier, keyFor(n++), 'day', 0);
  check(minuteIndex(), {
    [`${tier} phase 2 stayed inside one UTC minute`]: (m) => m === data.phase1Minute + 1,
  });
}

export function anonymous(data) {
  runTier('anonymous', data, () => undefined);
}

export function free(data) {
  runTier('free', data, (n) => FREE_KEYS[n % FREE_KEYS.length]);
}

export function pro(data) {
  runTier('pro', data, () => PRO_KEY);
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
