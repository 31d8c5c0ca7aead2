// The answers of a detect request as the k6 scenarios tell them apart (steady.js, mixed.js): one k6
// counter per outcome, the outcome of a response, and the totals their runners read from the summary
// (SUMMARY_JSON: the answers by outcome, and how many requests were sent). Imported in k6's init
// context, where counters must be made.

import { Counter } from 'k6/metrics';

export const OUTCOMES = ['200', '429', '503/5001', '503/other', '502', '504', 'connection error', 'other'];
const metricName = (o) => `answers_${o.replace(/\W/g, '_')}`;
const counters = Object.fromEntries(OUTCOMES.map((o) => [o, new Counter(metricName(o))]));
// Requests sent: those in flight when a runner stops k6 were sent (and maybe charged) but not answered.
const started = new Counter('requests_started');

/** Counts a request as sent; call before sending it. */
export function countSent() {
  started.add(1);
}

/** The outcome of a response, counted: a 503 is told apart by its error code (5001: unavailable). */
export function countAnswer(res) {
  const o = outcome(res);
  counters[o].add(1);
  return o;
}

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

/** The answer no runner expects: said in full (status and body) where the scenario logs it. */
export const unexpected = (o) => o === 'other' || o === '503/other';

/** handleSummary's JSON for SUMMARY_JSON: `{ counts: { outcome: n }, sent }`. */
export function summaryJson(data) {
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, data.metrics[metricName(o)]?.values.count ?? 0]));
  const sent = data.metrics.requests_started?.values.count ?? 0;
  return JSON.stringify({ counts, sent });
}
