// Steady mixed traffic against a running deployment (the gateway Service of a cluster, `npm run stack`,
// `npm start`), for drains, node losses and soaks: loadtests/mixed.js through k6, every answer counted,
// printed second by second as it comes and in total at the end, by outcome (200, 429, 503/5001, …) and
// by format and authentication.
//
//   BASE_URL=http://10.96.0.20 KEYS=nsk_live_…,nsk_live_… RATE=8 DURATION=30m npx tsx loadtests/mixed.ts
//
// Env: BASE_URL (required); KEYS (API keys, comma-separated: a share of the requests uses them, on
// /api/open/detect; the rest is anonymous, on /api/public/detect); KEY_SHARE (0–1, default 0.5 with
// KEYS); RATE (requests per second, default 4); DURATION (k6 duration, default 10m); SUMMARY_JSON (a
// file for the totals and the seconds, as JSON); K6 (the k6 binary; default: the tools cache or PATH).
// Exits 0 when k6 ran to the end, whatever the answers: the caller decides which outcomes are allowed.
// The six images are the corpus fixtures of test/fixtures/corpus.ts (a JPEG, a PNG, a WebP, a TIFF, a
// GIF) and a BMP made from the JPEG.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { bmpFromRgb } from '../test/fixtures/bmp.ts';
import { fixture } from '../test/fixtures/corpus.ts';
import { spawnChild } from '../test/support/children.ts';
import { ROOT } from '../test/support/server-process.ts';
import { K6, requireTool } from '../test/support/tools.ts';

/** One image per input format of the spec. */
const FORMAT_FIXTURES = {
  jpeg: '320x240.jpg',
  png: 'Flag_of_the_Netherlands.png',
  webp: '5_webp_a.webp',
  tiff: 'uncompressed_tiff.tiff',
  gif: 'animated-loop-3.gif',
} as const;

export interface MixedOptions {
  baseUrl: string;
  keys?: string[];
  keyShare?: number;
  rate?: number;
  duration?: string;
  /** Each completed second's line, as it is printed. */
  onSecond?: (line: string) => void;
}

export interface MixedResult {
  exitCode: number | null;
  /** Answers by outcome. */
  totals: Record<string, number>;
  /** Answers by format, then outcome; by authentication, then outcome. */
  byFormat: Record<string, Record<string, number>>;
  byAuth: Record<string, Record<string, number>>;
  /** Seconds since the first answer → answers by outcome. */
  seconds: Array<Record<string, number>>;
  /** Requests sent (started), answered or not. */
  sent: number;
  output: string;
}

/** The six images, written to `dir`: `format=path` entries for IMAGES. */
export async function writeFormatImages(dir: string): Promise<string> {
  const entries = Object.entries(FORMAT_FIXTURES).map(([format, name]) => `${format}=${fixture(name)}`);
  const { data, info } = await sharp(fixture(FORMAT_FIXTURES.jpeg))
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  const bmp = join(dir, 'mixed.bmp');
  writeFileSync(bmp, bmpFromRgb(data, info.width, info.height));
  entries.push(`bmp=${bmp}`);
  return entries.join(',');
}

const add = (to: Record<string, number>, key: string) => {
  to[key] = (to[key] ?? 0) + 1;
};

/** The counts under `key` of a two-level table, made on first use. */
const row = (table: Record<string, Record<string, number>>, key: string) => {
  table[key] ??= {};
  return table[key];
};

const format = (counts: Record<string, number>) =>
  Object.entries(counts)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([o, n]) => `${o}:${n}`)
    .join(' ');

export async function runMixed(opts: MixedOptions): Promise<MixedResult> {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-mixed-'));
  const summaryFile = join(dir, 'summary.json');
  const totals: Record<string, number> = {};
  const byFormat: Record<string, Record<string, number>> = {};
  const byAuth: Record<string, Record<string, number>> = {};
  const seconds: Array<Record<string, number>> = [];
  let first: number | undefined;
  let printed = 0;
  const print = (upTo: number) => {
    for (; printed < upTo; printed++) {
      const line = `${String(printed + 1).padStart(5)}s  ${format(seconds[printed] ?? {}) || '(no answer)'}`;
      opts.onSecond?.(line);
    }
  };
  let partial = '';
  const take = (chunk: string) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop() ?? '';
    for (const raw of lines) {
      if (!raw.startsWith('{"t":')) continue;
      const a = JSON.parse(raw) as {
        t: number;
        outcome: string;
        format: string;
        auth: string;
        body?: string;
      };
      first ??= a.t;
      const second = Math.floor((a.t - first) / 1000);
      seconds[second] ??= {};
      add(seconds[second] as Record<string, number>, a.outcome);
      add(totals, a.outcome);
      add(row(byFormat, a.format), a.outcome);
      add(row(byAuth, a.auth), a.outcome);
      if (a.body) opts.onSecond?.(`        unexpected answer (${a.format}, ${a.auth}): ${a.body}`);
    }
  };
  try {
    const images = await writeFormatImages(dir);
    const child = spawnChild(
      'k6',
      process.env.K6 ?? requireTool(K6),
      ['run', '--quiet', '--no-color', '--log-format', 'raw', join(ROOT, 'loadtests', 'mixed.js')],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          K6_NO_USAGE_REPORT: 'true',
          BASE_URL: opts.baseUrl,
          IMAGES: images,
          KEYS: (opts.keys ?? []).join(','),
          ...(opts.keyShare === undefined ? {} : { KEY_SHARE: String(opts.keyShare) }),
          RATE: String(opts.rate ?? 4),
          DURATION: opts.duration ?? '10m',
          SUMMARY_JSON: summaryFile,
        },
        onOutput: take,
      },
    );
    // A second is printed once the next-but-one has begun: its late answers are in.
    const ticker = setInterval(() => {
      if (first !== undefined) print(Math.max(0, Math.floor((Date.now() - first) / 1000) - 1));
    }, 1000);
    // Ctrl-C: k6 stops the scenario (SIGINT) and still writes its summary.
    const forward = () => child.proc.kill('SIGINT');
    process.once('SIGINT', forward);
    const exitCode = await child.exited;
    process.off('SIGINT', forward);
    clearInterval(ticker);
    take('\n');
    print(seconds.length);
    let sent = 0;
    try {
      sent = (JSON.parse(readFileSync(summaryFile, 'utf8')) as { sent: number }).sent;
    } catch {
      // k6 failed before its summary: the output says why.
    }
    return { exitCode, totals, byFormat, byAuth, seconds, sent, output: child.output() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const baseUrl = process.env.BASE_URL;
  if (!baseUrl) {
    console.error(
      'BASE_URL is required (the gateway, e.g. http://10.96.0.20): see the top of loadtests/mixed.ts',
    );
    process.exit(2);
  }
  const keys = (process.env.KEYS ?? '').split(',').filter((k) => k !== '');
  const rate = Number(process.env.RATE ?? 4);
  console.log(
    `mixed traffic: ${rate}/s to ${baseUrl}, six formats, ${keys.length ? `${keys.length} key(s) and ` : ''}anonymous`,
  );
  const result = await runMixed({
    baseUrl,
    keys,
    ...(process.env.KEY_SHARE ? { keyShare: Number(process.env.KEY_SHARE) } : {}),
    rate,
    duration: process.env.DURATION ?? '10m',
    onSecond: (line) => console.log(line),
  });
  console.log(`total  ${format(result.totals)}  (sent ${result.sent})`);
  for (const [f, counts] of Object.entries(result.byFormat))
    console.log(`  ${f.padEnd(10)} ${format(counts)}`);
  for (const [a, counts] of Object.entries(result.byAuth)) console.log(`  ${a.padEnd(10)} ${format(counts)}`);
  if (process.env.SUMMARY_JSON) {
    const { output: _output, ...rest } = result;
    writeFileSync(process.env.SUMMARY_JSON, JSON.stringify(rest));
  }
  if (result.exitCode !== 0) console.error(result.output.slice(-4000));
  process.exit(result.exitCode ?? 1);
}
