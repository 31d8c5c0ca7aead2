// k6 throughput scenario for the detect path: VUS clients post one JPEG as fast as the service answers,
// for DURATION, and the summary prints requests per second and p50/p95 latency of the successful
// requests. With KEY set it goes through the key endpoint (quota on the account, so give it a tier with
// limits high enough); without, through the anonymous endpoint (raise ANON_PER_* on the server).
//
// Env: BASE_URL, IMAGE (a JPEG path), KEY (optional), VUS (default 4), DURATION (default 20s),
// SUMMARY_JSON (optional path for the machine-readable figures).

import { check } from 'k6';
import http from 'k6/http';

const BASE_URL = __ENV.BASE_URL ?? 'http://127.0.0.1:8080';
const IMAGE = open(__ENV.IMAGE, 'b');
const KEY = __ENV.KEY ?? '';
const PATH = KEY ? '/api/open/detect' : '/api/public/detect';
const HEADERS = KEY
  ? { 'content-type': 'image/jpeg', authorization: `Bearer ${KEY}` }
  : { 'content-type': 'image/jpeg' };

export const options = {
  scenarios: {
    detect: {
      executor: 'constant-vus',
      vus: Number(__ENV.VUS ?? 4),
      duration: __ENV.DURATION ?? '20s',
      gracefulStop: '10s',
    },
  },
  thresholds: {
    // Every request answered 200 with a score: no 429 (limits too low) and no 503 (overload).
    checks: ['rate==1'],
    'http_req_duration{expected_response:true}': ['p(95)<10000'],
  },
  summaryTrendStats: ['min', 'med', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  const res = http.post(`${BASE_URL}${PATH}`, IMAGE, { headers: HEADERS });
  const ok = check(res, {
    'status 200': (r) => r.status === 200,
    'has a score': (r) => {
      try {
        return typeof JSON.parse(r.body).data.scores.nsfw === 'number';
      } catch {
        return false;
      }
    },
  });
  if (!ok) console.error(`HTTP ${res.status} ${String(res.body).slice(0, 200)}`);
}

export function handleSummary(data) {
  const m = data.metrics;
  const seconds = data.state.testRunDurationMs / 1000;
  const ok = m.http_req_duration?.values ?? {};
  const okTrend = m['http_req_duration{expected_response:true}']?.values ?? ok;
  const requests = m.http_reqs?.values.count ?? 0;
  const failed = m.http_req_failed?.values.passes ?? 0;
  const figures = {
    endpoint: PATH,
    vus: Number(__ENV.VUS ?? 4),
    seconds: Number(seconds.toFixed(1)),
    requests,
    failed,
    req_per_s: Number((m.http_reqs?.values.rate ?? 0).toFixed(2)),
    p50_ms: Number((okTrend.med ?? 0).toFixed(1)),
    p95_ms: Number((okTrend['p(95)'] ?? 0).toFixed(1)),
    max_ms: Number((okTrend.max ?? 0).toFixed(1)),
  };
  const line =
    `\ndetect throughput (${figures.endpoint}, ${figures.vus} VUs, ${figures.seconds} s): ` +
    `${figures.req_per_s} req/s, p50 ${figures.p50_ms} ms, p95 ${figures.p95_ms} ms, ` +
    `max ${figures.max_ms} ms; ${requests} requests, ${failed} failed\n`;
  const out = { stdout: line };
  if (__ENV.SUMMARY_JSON) out[__ENV.SUMMARY_JSON] = `${JSON.stringify(figures, null, 2)}\n`;
  return out;
}
