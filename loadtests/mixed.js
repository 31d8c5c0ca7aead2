// k6 steady mixed traffic (loadtests/mixed.ts runs it and prints the answers second by second): RATE
// detects per second for DURATION, cycling through the six input formats of the spec (JPEG, PNG, WebP,
// BMP, TIFF, GIF), a share of them with an API key (on /api/open/detect), the rest anonymous (on
// /api/public/detect). Nothing is checked here: every answer is logged as one JSON line
// ({t, outcome, format, auth}) for the runner to count, and the summary (SUMMARY_JSON) holds the totals.
//
// Env: BASE_URL, IMAGES (`jpeg=/path,png=/path,…`), KEYS (API keys, comma-separated; optional),
// KEY_SHARE (share of requests with a key, 0–1; default 0.5 with KEYS, else 0), RATE (default 4),
// DURATION (default 10m), SUMMARY_JSON (optional).

import exec from 'k6/execution';
import http from 'k6/http';
import { countAnswer, countSent, summaryJson, unexpected } from './answers.js';

const BASE_URL = __ENV.BASE_URL;
const IMAGES = __ENV.IMAGES.split(',').map((entry) => {
  const [format, path] = entry.split('=');
  return { format, body: open(path, 'b') };
});
const KEYS = (__ENV.KEYS ?? '').split(',').filter((k) => k !== '');
const KEY_SHARE = KEYS.length ? Number(__ENV.KEY_SHARE ?? 0.5) : 0;

export const options = {
  scenarios: {
    mixed: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE ?? 4),
      timeUnit: '1s',
      duration: __ENV.DURATION ?? '10m',
      preAllocatedVUs: 20,
      maxVUs: 200,
      gracefulStop: '30s',
    },
  },
};

export default function () {
  countSent();
  // Iterations are numbered across VUs: the formats and the key share spread evenly.
  const n = Number(exec.scenario.iterationInTest);
  const image = IMAGES[n % IMAGES.length];
  const withKey = KEY_SHARE > 0 && (n * 0.6180339887) % 1 < KEY_SHARE;
  const headers = { 'content-type': `image/${image.format}` };
  if (withKey) headers.authorization = `Bearer ${KEYS[n % KEYS.length]}`;
  const path = withKey ? '/api/open/detect' : '/api/public/detect';
  const res = http.post(`${BASE_URL}${path}`, image.body, { headers, timeout: '60s' });
  const o = countAnswer(res);
  const line = { t: Date.now(), outcome: o, format: image.format, auth: withKey ? 'key' : 'anonymous' };
  if (unexpected(o)) line.body = `${res.status} ${String(res.body).slice(0, 200)}`;
  console.log(JSON.stringify(line));
}

export function handleSummary(data) {
  return __ENV.SUMMARY_JSON ? { [__ENV.SUMMARY_JSON]: summaryJson(data) } : {};
}
