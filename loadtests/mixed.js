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
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL;
const IMAGES = __ENV.IMAGES.split(',').map((entry) => {
  const [format, path] = entry.split('=');
  return { format, body: open(path, 'b') };
});
const KEYS = (__ENV.KEYS ?? '').split(',').filter((k) => k !== '');
const KEY_SHARE = KEYS.length ? Number(__ENV.KEY_SHARE ?? 0.5) : 0;

const OUTCOMES = ['200', '429', '503/5001', '503/other', '502', '504', 'connection error', 'other'];
const counters = Object.fromEntries(
  OUTCOMES.map((o) => [o, new Counter(`answers_${o.replace(/\W/g, '_')}`)]),
);
const started = new Counter('requests_started');

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
  // Iterations are numbered across VUs: the formats and the key share spread evenly.
  const n = Number(exec.scenario.iterationInTest);
  const image = IMAGES[n % IMAGES.length];
  const withKey = KEY_SHARE > 0 && (n * 0.6180339887) % 1 < KEY_SHARE;
  const headers = { 'content-type': `image/${image.format}` };
  if (withKey) headers.authorization = `Bearer ${KEYS[n % KEYS.length]}`;
  const path = withKey ? '/api/open/detect' : '/api/public/detect';
  const res = http.post(`${BASE_URL}${path}`, image.body, { headers, timeout: '60s' });
  const o = outcome(res);
  counters[o].add(1);
  const line = { t: Date.now(), outcome: o, format: image.format, auth: withKey ? 'key' : 'anonymous' };
  if (o === 'other' || o === '503/other') line.body = `${res.status} ${String(res.body).slice(0, 200)}`;
  console.log(JSON.stringify(line));
}

export function handleSummary(data) {
  const counts = Object.fromEntries(
    OUTCOMES.map((o) => [o, data.metrics[`answers_${o.replace(/\W/g, '_')}`]?.values.count ?? 0]),
  );
  const sent = data.metrics.requests_started?.values.count ?? 0;
  return __ENV.SUMMARY_JSON ? { [__ENV.SUMMARY_JSON]: JSON.stringify({ counts, sent }) } : {};
}
