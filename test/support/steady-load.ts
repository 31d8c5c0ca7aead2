// Steady k6 traffic for the node suites (loadtests/steady.js): detects at a constant rate through the
// gateway until stopped, every answer counted by outcome. The suites decide which outcomes are allowed.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fixture } from '../fixtures/corpus.ts';
import { type Child, spawnChild } from './children.ts';
import { REPO } from './paths.ts';
import { STACK_TOOLS } from './stack-tools.ts';

const OUTCOMES = ['200', '429', '503/5001', '503/other', '502', '504', 'connection error', 'other'] as const;
export type Counts = Record<(typeof OUTCOMES)[number], number>;
export const zeroCounts = (): Counts => Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Counts;

export interface SteadyLoad {
  /** Stops k6; the answers by outcome, and how many requests the stop cut before their answer. */
  stop(): Promise<{ counts: Counts; unanswered: number }>;
}

/**
 * `rate` detects per second through `gateway`: with `key` on the key endpoint, without one on the
 * anonymous endpoint.
 */
export function startLoad(gateway: string, rate: number, key?: string): SteadyLoad {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-k6-'));
  const summaryFile = join(dir, 'counts.json');
  const child: Child = spawnChild(
    'k6',
    STACK_TOOLS.k6.find() as string,
    ['run', '--quiet', '--no-color', join(REPO, 'loadtests/steady.js')],
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
    async stop() {
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
        // The answers no check expects, as k6 logged them (loadtests/steady.js).
        const unexpected = child
          .output()
          .split('\n')
          .filter((l) => l.includes('steady: '));
        if (unexpected.length) console.log(`k6: unexpected answers:\n${unexpected.slice(0, 10).join('\n')}`);
        const counts = { ...zeroCounts(), ...summary.counts };
        const answered = Object.values(counts).reduce((a, b) => a + b, 0);
        return { counts, unanswered: summary.sent - answered };
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
