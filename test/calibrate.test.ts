// `npm run calibrate` end to end: two labelled folders built from the shared corpus, the real CLI
// (real model, in process), then the report checked: each score is asked again of the real server over
// HTTP (the same pipeline must give the same score), the expected failures come from the corpus map,
// and every output file carries the table and suggestion of the recorded scores. The rules that make
// the table and the suggestion are checked against hand-computed figures in
// tools/calibrate/metrics.test.ts; here, that the report applies them to what it scored, and facts
// about the real scores that need no rule to see. Finally the HTML report is opened in headless
// Chromium (charts must load) and photographed into test-artifacts/.

import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { suggestThresholds, type ThresholdRow, thresholdTable } from '../tools/calibrate/metrics.ts';
import { CORPUS, labelledCorpus } from './fixtures/corpus.ts';
import { calibrateCorpus } from './support/calibrate-cli.ts';
import { childEnv } from './support/children.ts';
import { ROOT, type ServerProcess, startServer } from './support/server-process.ts';
import { CHROMIUM, describeWithTool, HELM, requireTool } from './support/tools.ts';

const run = promisify(execFile);
const NSFW = ['320x240.jpg', '4.webp', 'Crash_test.gif', 'Landscape_1.jpg', 'corrupt-header.jpg'];
const SFW = [
  'Flag_of_the_Netherlands.png',
  '2x2_fdcce6.png',
  '5_webp_a.webp',
  '65536-uint32-limit.png',
  'check.svg',
];
const TARGET_FALSE_BLOCK = 0.34;
const TARGET_MISS = 0.25;

let work: string;
let out: string;
let stderr = '';
const csv = new Map<string, { nsfw?: number; code?: number }>();

beforeAll(async () => {
  work = labelledCorpus('nsfwdetector-calibrate-', { nsfw: NSFW, sfw: SFW });
  // Ten images are too few for advice (tools/calibrate/advice.ts): --force writes the files anyway,
  // which is what these checks read (the refusal itself: test/calibrate-advice.test.ts).
  const result = await calibrateCorpus(work, [
    '--force',
    '--target-false-block',
    String(TARGET_FALSE_BLOCK),
    '--target-miss',
    String(TARGET_MISS),
  ]);
  ({ stderr, out } = result);
  for (const line of readFileSync(join(out, 'scores.csv'), 'utf8').trim().split('\n').slice(1)) {
    const [label, file, nsfw, code] = line.split(',');
    csv.set(`${label}/${JSON.parse(file as string)}`, {
      ...(nsfw ? { nsfw: Number(nsfw) } : {}),
      ...(code ? { code: Number(code) } : {}),
    });
  }
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('npm run calibrate', () => {
  it('lists every file: a score, or the error code the corpus map gives it', () => {
    const expected = new Map<string, { nsfw?: number; code?: number }>();
    for (const [label, names] of [
      ['nsfw', NSFW],
      ['sfw', SFW],
    ] as const) {
      for (const name of names) {
        const outcome = CORPUS[name];
        if (!outcome) throw new Error(name);
        expected.set(`${label}/${name}`, 'error' in outcome ? { code: outcome.error } : {});
      }
    }
    expect([...csv.keys()].sort()).toEqual([...expected.keys()].sort());
    for (const [key, want] of expected) {
      const got = csv.get(key);
      if (want.code) expect(got, key).toEqual({ code: want.code });
      else expect(got?.nsfw, key).toBeTypeOf('number');
    }
    // Failures are told on stderr with their code, and the progress bar ran to the end.
    expect(stderr).toContain('not decodable: nsfw/corrupt-header.jpg: 4005');
    expect(stderr).toContain('not decodable: sfw/65536-uint32-limit.png: 4004');
    expect(stderr).toContain('not decodable: sfw/check.svg: 4002');
    expect(stderr).toMatch(/\] 10\/10 .*ETA/);
  });

  it('writes the threshold table and suggestion of the recorded scores into every output', () => {
    const scores = (label: string) =>
      [...csv]
        .filter(([k, v]) => k.startsWith(`${label}/`) && v.nsfw !== undefined)
        .map(([, v]) => v.nsfw as number);
    const nsfw = scores('nsfw');
    const sfw = scores('sfw');
    expect([nsfw.length, sfw.length]).toEqual([4, 3]);
    const expected = thresholdTable(nsfw, sfw);
    const { allow, block } = suggestThresholds(expected, TARGET_FALSE_BLOCK, TARGET_MISS);
    // Seen by counting: at 0 every image is blocked; a false-block target of 0.34 on three SFW images
    // lets one of them be blocked, so the lowest block is the first candidate above the second-highest
    // SFW score; allow stays below it.
    expect(expected[0]).toMatchObject({ threshold: 0, sfwBlocked: 3, nsfwMissed: 0, recall: 1 });
    const secondSfw = [...sfw].sort((x, y) => x - y)[1] as number;
    expect(block).toBeGreaterThan(secondSfw);
    expect(block - 0.01).toBeLessThanOrEqual(secondSfw);
    expect(allow).toBeLessThan(block);

    const report = JSON.parse(readFileSync(join(out, 'thresholds.json'), 'utf8')) as {
      suggestion: { allow: number; block: number };
      table: ThresholdRow[];
    };
    expect(report.table).toEqual(expected);
    expect(report.suggestion).toEqual({ allow, block });
    expect(readFileSync(join(out, 'thresholds.env'), 'utf8')).toBe(
      `THRESHOLD_ALLOW=${allow}\nTHRESHOLD_BLOCK=${block}\n`,
    );
    expect(readFileSync(join(out, 'values.yaml'), 'utf8')).toBe(
      `config:\n  thresholdAllow: ${allow}\n  thresholdBlock: ${block}\n`,
    );
    const policy = readFileSync(join(out, 'detection-policy.yaml'), 'utf8');
    expect(policy).toContain('kind: DetectionPolicy');
    expect(policy).toContain(`    allow: ${allow}\n    block: ${block}\n`);
    // The thresholds were fitted on the configured model (the default, mobilenet_v2): the policy names
    // it, or the operator would apply them to whatever its spec.model defaults to.
    expect(policy).toContain('  model: mobilenet_v2\n');
    const html = readFileSync(join(out, 'index.html'), 'utf8');
    expect(html).toContain(`<span id="allow">${allow}</span>`);
    expect(html).toContain(`<span id="block">${block}</span>`);
    // The suggested block row, as the report shows it.
    const row = expected[Math.round(block * 100)] as ThresholdRow;
    expect(html).toContain(
      `<td>${block.toFixed(2)}</td><td>${row.sfwBlocked}</td><td>${(row.falseBlockRate * 100).toFixed(2)} %</td><td>${row.nsfwMissed}</td>`,
    );
  });
});

describe("the scores are the server's", () => {
  let server: ServerProcess;
  beforeAll(async () => {
    server = await startServer({ LOG_LEVEL: 'warn' });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it('gives, over HTTP, the score the calibration recorded for each image', async () => {
    for (const [key, v] of csv) {
      if (v.nsfw === undefined) continue;
      const form = new FormData();
      form.append('file', new Blob([new Uint8Array(readFileSync(join(work, key)))]), key);
      const res = await fetch(`${server.url}/api/public/detect`, { method: 'POST', body: form });
      const body = (await res.json()) as { code: number; data: { scores: { nsfw: number } } };
      expect(body.code, key).toBe(0);
      expect(body.data.scores.nsfw, key).toBeCloseTo(v.nsfw, 6);
    }
  });
});

describeWithTool(CHROMIUM, 'the calibration report in Chromium', () => {
  it('renders with its three charts and is photographed', async () => {
    const browser = await chromium.launch({
      executablePath: CHROMIUM.find(),
      env: childEnv(),
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--allow-file-access-from-files'],
    });
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      await page.goto(pathToFileURL(join(out, 'index.html')).href);
      const widths = await page.$$eval('img', (imgs) =>
        imgs.map((i) => (i as HTMLImageElement).complete && (i as HTMLImageElement).naturalWidth),
      );
      expect(widths).toEqual([480, 480, 480]);
      expect(await page.locator('#thresholds tbody tr').count()).toBeGreaterThan(20);
      mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
      await page.screenshot({ path: join(ROOT, 'test-artifacts', 'calibration-report.png'), fullPage: true });
    } finally {
      await browser.close();
    }
  }, 120_000);
});

// The chart takes the report's values file as it is: its pods get the suggested thresholds.
describeWithTool(HELM, 'the calibration values in the Helm chart', () => {
  it('renders the suggested thresholds into every service', async () => {
    const { suggestion } = JSON.parse(readFileSync(join(out, 'thresholds.json'), 'utf8')) as {
      suggestion: { allow: number; block: number };
    };
    // Helm's own homes inside this suite's folder (removed with it); no cluster is needed to render.
    const { stdout } = await run(
      requireTool(HELM),
      ['template', 'calibrated', join(ROOT, 'charts', 'nsfwdetector'), '-f', join(out, 'values.yaml')],
      {
        env: {
          ...process.env,
          HELM_CACHE_HOME: join(work, 'helm', 'cache'),
          HELM_CONFIG_HOME: join(work, 'helm', 'config'),
          HELM_DATA_HOME: join(work, 'helm', 'data'),
          KUBECONFIG: join(work, 'helm', 'no-kubeconfig'),
        },
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    const allow = stdout.match(/name: THRESHOLD_ALLOW, value: "([^"]*)"/g) ?? [];
    expect(allow.length).toBeGreaterThan(0);
    expect(new Set(allow)).toEqual(new Set([`name: THRESHOLD_ALLOW, value: "${suggestion.allow}"`]));
    expect(stdout).toContain(`name: THRESHOLD_BLOCK, value: "${suggestion.block}"`);
  }, 120_000);
});
