// k6 steady traffic for the node suites (test/support/steady-load.ts): RATE detects per second through the
// gateway (with KEY on the key endpoint, without it on the anonymous one) for up to DURATION (the suite
// stops it with SIGINT once the rollout, the deletions or the scaling it watches are over), counting
// every answer by outcome. Nothing is checked here: the suite
// reads the counts (SUMMARY_JSON: the answers by outcome, and how many requests were sent) and decides
// what was allowed.
//
// Env: BASE_URL, IMAGE (a JPEG path), KEY (optional), RATE (default 4), DURATION (default 10m), SUMMARY_JSON.

import http from 'k6/http';
import { countAnswer, countSent, summaryJson } from './answers.js';

const BASE_URL = __ENV.BASE_URL;
const IMAGE = open(__ENV.IMAGE, 'b');
const HEADERS = __ENV.KEY
  ? { 'content-type': 'image/jpeg', authorization: `Bearer ${__ENV.KEY}` }
  : { 'content-type': 'image/jpeg' };
const PATH = __ENV.KEY ? '/api/open/detect' : '/api/public/detect';

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

export default function () {
  countSent();
  const sent = Date.now();
  const res = http.post(`${BASE_URL}${PATH}`, IMAGE, { headers: HEADERS, timeout: '60s' });
  const o = countAnswer(res);
  // Every answer but 200 and 429, said in full: when it was sent and answered (epoch ms: the suite puts
  // them on its own timeline), which status and body (a 503/5001's message tells the quota store from
  // detect's; Envoy's local reply and the quota sidecar's refusal say the same) and its headers, or
  // for a connection error k6's error.
  if (o !== '200' && o !== '429')
    console.warn(
      `steady: sent=${sent} at=${Date.now()} outcome=${encodeURIComponent(o)} ${
        res.status === 0
          ? `connection error ${res.error_code}: ${res.error}`
          : `${res.status} ${String(res.body).slice(0, 300)} headers ${answerHeaders(res)}`
      }`,
    );
}

// An answer's headers, as JSON, to tell who answered (Envoy's local reply, detect, the quota sidecar's
// refusal relayed by ext_authz). All of them: the chart's Envoy adds no `server` and no `x-envoy-*`
// headers (suppress_envoy_headers, server_header_transformation PASS_THROUGH), so those say nothing.
function answerHeaders(res) {
  const all = {};
  for (const [name, value] of Object.entries(res.headers)) all[name.toLowerCase()] = value;
  return JSON.stringify(all);
}

export function handleSummary(data) {
  return { [__ENV.SUMMARY_JSON]: summaryJson(data) };
}
