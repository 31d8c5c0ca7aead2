// k6 steady traffic for the node suites (test/support/steady-load.ts): RATE detects per second through the
// gateway (with KEY on the key endpoint, without it on the anonymous one) for up to DURATION (the suite
// stops it with SIGINT once the rollout, the deletions or the scaling it watches are over), counting
// every answer by outcome. Nothing is checked here: the suite
// reads the counts (SUMMARY_JSON: the answers by outcome, and how many requests were sent) and decides
// what was allowed.
//
// Env: BASE_URL, IMAGE (a JPEG path), KEY (optional), RATE (default 4), DURATION (default 10m), SUMMARY_JSON.

import http from 'k6/http';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL;
const IMAGE = open(__ENV.IMAGE, 'b');
const HEADERS = __ENV.KEY
  ? { 'content-type': 'image/jpeg', authorization: `Bearer ${__ENV.KEY}` }
  : { 'content-type': 'image/jpeg' };
const PATH = __ENV.KEY ? '/api/open/detect' : '/api/public/detect';

// One counter per outcome the suite tells apart.
const OUTCOMES = ['200', '429', '503/5001', '503/other', '502', '504', 'connection error', 'other'];
const metricName = (o) => `answers_${o.replace(/\W/g, '_')}`;
const counters = Object.fromEntries(OUTCOMES.map((o) => [o, new Counter(metricName(o))]));
// Requests sent: those in flight when the suite stops k6 were sent (and maybe charged) but not answered.
const started = new Counter('requests_started');

export const options = {
  scenarios: {
    steady: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE ?? 4),
      timeUnit: '1s',
      duration: __ENV.DURATION ?? '10m',
      preAllocatedVUs: 20,
      maxVUs: 100,
      gracefulStop: '30s',
    },
  },
};

function outcome(res) {
  if (res.status === 0) return 'connection error';
  if (res.status === 503) {
    let code;
    try {
      code = res.json('code');
    } catch {
      code = undefined;
    }
    return code === 5001 ? '503/5001' : '503/other';
  }
  return OUTCOMES.includes(String(res.status)) ? String(res.status) : 'other';
}

export default function () {
  started.add(1);
  const res = http.post(`${BASE_URL}${PATH}`, IMAGE, { headers: HEADERS, timeout: '60s' });
  const o = outcome(res);
  counters[o].add(1);
  // The rare answer no check expects, said in full: which status, which body.
  if (o === 'other' || o === '503/other')
    console.warn(`steady: ${res.status} ${String(res.body).slice(0, 300)}`);
}

export function handleSummary(data) {
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, data.metrics[metricName(o)]?.values.count ?? 0]));
  const sent = data.metrics.requests_started?.values.count ?? 0;
  return { [__ENV.SUMMARY_JSON]: JSON.stringify({ counts, sent }) };
}
