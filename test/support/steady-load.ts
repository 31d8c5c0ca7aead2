// Steady k6 traffic for the node suites (loadtests/steady.js): detects at a constant rate through the
// gateway until stopped, every answer counted by outcome. The suites decide which outcomes are allowed.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import { fixture } from '../fixtures/corpus.ts';
import { type Child, spawnChild } from './children.ts';
import { REPO } from './paths.ts';
import { STACK_TOOLS } from './stack-tools.ts';

const OUTCOMES = ['200', '429', '503/5001', '503/other', '502', '504', 'connection error', 'other'] as const;
export type Outcome = (typeof OUTCOMES)[number];
export type Counts = Record<Outcome, number>;
export const zeroCounts = (): Counts => Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Counts;

export interface SteadyLoad {
  /**
   * Stops k6; the answers by outcome, how many requests the stop cut before their answer, and with
   * `timeline`, the answers by outcome for each second (Unix seconds) in which some came. The
   * unexpected answers and connection errors are printed, with their times relative to `zero` (epoch
   * ms) when given.
   */
  stop(zero?: number): Promise<{
    counts: Counts;
    unanswered: number;
    perSecond: Map<number, Counts>;
    unexpected: UnexpectedAnswer[];
  }>;
}

export type SteadyResult = Awaited<ReturnType<SteadyLoad['stop']>>;

/** An answer no check expects, or a connection error, as loadtests/steady.js logged it. */
export interface UnexpectedAnswer {
  /** Epoch ms the request was sent and its answer (or error) came. */
  sent: number;
  at: number;
  outcome: Outcome;
  /**
   * The status, body and every response header (`headers {…}`: to tell Envoy's local reply from
   * detect's and the quota sidecar's), or `connection error <k6 error_code>: <k6 error>`.
   */
  text: string;
}

/**
 * `rate` detects per second through `gateway`: with `key` on the key endpoint, without one on the
 * anonymous endpoint.
 */
export function startLoad(
  gateway: string,
  rate: number,
  key?: string,
  opts: { timeline?: boolean } = {},
): SteadyLoad {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-k6-'));
  const summaryFile = join(dir, 'counts.json');
  const samplesFile = join(dir, 'samples.csv');
  const child: Child = spawnChild(
    'k6',
    STACK_TOOLS.k6.find() as string,
    [
      'run',
      '--quiet',
      '--no-color',
      '--log-format',
      'raw',
      ...(opts.timeline ? ['--out', `csv=${samplesFile}`] : []),
      join(REPO, 'loadtests/steady.js'),
    ],
    {
      cwd: REPO,
      env: {
        ...process.env,
        K6_NO_USAGE_REPORT: 'true',
        BASE_URL: gateway,
        IMAGE: fixture('320x240.jpg'),
        ...(key ? { KEY: key } : {}),
        RATE: String(rate),
        SUMMARY_JSON: summaryFile,
      },
    },
  );
  return {
    async stop(zero?: number) {
      try {
        // SIGINT: k6 stops the scenario and still writes the summary (a SIGTERM would abort it).
        if (child.running()) child.proc.kill('SIGINT');
        await Promise.race([child.exited, sleep(60_000)]);
        await child.stop(5_000);
        let summary: { counts: Counts; sent: number };
        try {
          summary = JSON.parse(readFileSync(summaryFile, 'utf8'));
        } catch {
          throw new Error(`k6 wrote no counts:\n${child.output().slice(-4000)}`);
        }
        // The answers no check expects and the connection errors, as k6 logged them (loadtests/steady.js).
        const unexpected = child
          .output()
          .split('\n')
          .map((l) => /steady: sent=(\d+) at=(\d+) outcome=(\S+) (.*)/.exec(l))
          .filter((m) => m !== null)
          .map((m) => ({
            sent: Number(m[1]),
            at: Number(m[2]),
            outcome: decodeURIComponent(m[3] as string) as Outcome,
            text: m[4] as string,
          }));
        const when = (ms: number) =>
          zero === undefined
            ? new Date(ms).toISOString()
            : `t${ms >= zero ? '+' : ''}${((ms - zero) / 1000).toFixed(1)} s`;
        if (unexpected.length) {
          // The kinds (their first 100 characters) counted, then the first and last 15 in full.
          const kinds = new Map<string, number>();
          for (const u of unexpected)
            kinds.set(u.text.slice(0, 100), (kinds.get(u.text.slice(0, 100)) ?? 0) + 1);
          const shown =
            unexpected.length > 30
              ? [...unexpected.slice(0, 15), undefined, ...unexpected.slice(-15)]
              : unexpected;
          console.log(
            `k6: answers other than 200 and 429 (${unexpected.length}): ${[...kinds].map(([t, n]) => `${n} × ${t}`).join('; ')}\n${shown
              .map((u) => (u ? `  sent ${when(u.sent)}, answered ${when(u.at)}: ${u.text}` : '  …'))
              .join('\n')}`,
          );
        }
        const counts = { ...zeroCounts(), ...summary.counts };
        const answered = Object.values(counts).reduce((a, b) => a + b, 0);
        const perSecond = opts.timeline ? answersPerSecond(readFileSync(samplesFile, 'utf8')) : new Map();
        return { counts, unanswered: summary.sent - answered, perSecond, unexpected };
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** k6's CSV samples: each answer counter's samples (one per answer) by Unix second. */
function answersPerSecond(csv: string): Map<number, Counts> {
  const byMetric = new Map(OUTCOMES.map((o) => [`answers_${o.replace(/\W/g, '_')}`, o]));
  const lines = csv.split('\n');
  const header = (lines[0] ?? '').split(',');
  const [nameAt, timeAt, valueAt] = ['metric_name', 'timestamp', 'metric_value'].map((c) =>
    header.indexOf(c),
  );
  const seconds = new Map<number, Counts>();
  for (const line of lines.slice(1)) {
    const cells = line.split(',');
    const outcome = byMetric.get(cells[nameAt as number] ?? '');
    if (!outcome) continue;
    const second = Number(cells[timeAt as number]);
    const counts = seconds.get(second) ?? zeroCounts();
    counts[outcome] += Number(cells[valueAt as number]);
    seconds.set(second, counts);
  }
  return seconds;
}

/**
 * Only `allowed` outcomes among the answers; a failure's message carries the first few others as k6
 * logged them (status, body, headers, or the connection error: who answered), so that an excerpt of
 * the failure alone says why.
 */
export function expectOnly(
  result: { counts: Counts; unexpected: UnexpectedAnswer[] },
  allowed: readonly Outcome[],
): void {
  const others = { ...result.counts };
  for (const o of allowed) others[o] = 0;
  const unexpected = result.unexpected.filter((u) => !allowed.includes(u.outcome));
  const shown = unexpected.slice(0, 5).map((u) => `${new Date(u.at).toISOString()} ${u.text.slice(0, 500)}`);
  if (unexpected.length > shown.length) shown.push(`… ${unexpected.length - shown.length} more`);
  expect(others, `answers other than ${allowed.join(', ')}:\n${shown.join('\n')}`).toEqual(zeroCounts());
}
