// `npm run docs:pictures`: every picture in the docs, made again from a real run of the current code, so
// that none can drift from what the code does (CI runs it). Each picture is written where the docs show
// it:
//   tools/calibrate/docs/report.png            a calibration report (docs/calibration.md)
//   tools/calibrate/docs/model-comparison.svg  the ROC of every model with its operating points (docs/models.md)
//   services/quota/console/docs/dashboard.png, dashboard-dark.png, dashboard-390.png
//                                              the console, light and dark, and at phone width (docs/accounts.md)
// The labelled folder is made from the shared test corpus (its labels are arbitrary: the pictures show
// what the report looks like, not how well a model does); the console is the real server process in
// Debian's Chromium (playwright-core), with a fresh accounts file.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { chromium, type Page } from 'playwright-core';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CORPUS = path.join(ROOT, '..', 'shared', 'corpus', 'sharp-fixtures');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
// The report shows the folders as given: a path inside the repository (test-artifacts/ is ignored).
const WORK = 'test-artifacts/docs-pictures';
const LABELLED = {
  nsfw: ['320x240.jpg', '4.webp', 'Landscape_1.jpg', 'Landscape_6.jpg', 'flowers.jpeg', 'Crash_test.gif'],
  sfw: [
    'Flag_of_the_Netherlands.png',
    '2x2_fdcce6.png',
    '5_webp_a.webp',
    'blackbug.png',
    'Landscape_3.jpg',
    'check.svg',
  ],
};
const run = promisify(execFile);
const tsx = (script: string, args: string[]) =>
  run(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: ROOT,
    env: { ...process.env, TSX_DISABLE_CACHE: '1', LOG_LEVEL: 'warn' },
  }).catch((err: { code?: number; stdout?: string; stderr?: string }) => {
    // A flagged calibration exits 1 and still writes its report: that report is the picture.
    if (err.code === 1 && err.stdout?.includes('report:'))
      return { stdout: err.stdout, stderr: err.stderr ?? '' };
    throw err;
  });

async function main(): Promise<void> {
  const work = path.join(ROOT, WORK);
  rmSync(work, { recursive: true, force: true });
  for (const [label, names] of Object.entries(LABELLED)) {
    mkdirSync(path.join(work, 'labelled', label), { recursive: true });
    for (const name of names) copyFileSync(path.join(CORPUS, name), path.join(work, 'labelled', label, name));
  }
  const dirs = ['--nsfw', `${WORK}/labelled/nsfw`, '--sfw', `${WORK}/labelled/sfw`];
  process.stderr.write('calibrating (one model, then three compared)…\n');
  await tsx('tools/calibrate/main.ts', [...dirs, '--out', `${WORK}/report`]);
  await tsx('tools/calibrate/main.ts', [
    ...dirs,
    '--out',
    `${WORK}/compare`,
    '--models',
    'mobilenet_v2,open_nsfw,mobilenet_v2+open_nsfw',
  ]);
  copyFileSync(
    path.join(work, 'compare', 'roc.svg'),
    path.join(ROOT, 'tools/calibrate/docs/model-comparison.svg'),
  );

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const server = await startServer();
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    await page.goto(pathToFileURL(path.join(work, 'report', 'index.html')).href);
    await page.waitForLoadState('load');
    await page.screenshot({ path: path.join(ROOT, 'tools/calibrate/docs/report.png'), fullPage: true });
    await consolePictures(page, server.url);
  } finally {
    await browser.close();
    await server.stop();
    rmSync(work, { recursive: true, force: true });
  }
  process.stderr.write('pictures written\n');
}

async function consolePictures(page: Page, url: string): Promise<void> {
  const out = (name: string) => path.join(ROOT, 'services/quota/console/docs', name);
  await page.goto(`${url}/console`);
  await page.locator('#auth-view').waitFor();
  const form = page.locator('#signup-form');
  await form.locator('input[name=email]').fill('ann@example.com');
  await form.locator('input[name=password]').fill('a long example password');
  await form.locator('button[type=submit]').click();
  await page.locator('#dashboard-view').waitFor();
  await page.locator('#create-key-form input[name=name]').fill('production');
  await page.locator('#create-key-form button[type=submit]').click();
  await page.locator('#new-key').waitFor();
  await page.locator('#new-key-done').click();
  await page.locator('#try-file').setInputFiles(path.join(CORPUS, '320x240.jpg'));
  await page.locator('#try-result').waitFor();
  // The key's secret stays out of the pictures.
  await page.locator('#try-key').fill('');
  for (const [scheme, width, name] of [
    ['light', 1100, 'dashboard.png'],
    ['dark', 1100, 'dashboard-dark.png'],
    ['light', 390, 'dashboard-390.png'],
  ] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height: 900 });
    await page.waitForTimeout(300); // the chart redraws on resize and on a scheme change
    // The key's secret out, and the address a reader's own server has in.
    for (const id of ['#try-curl', '#try-cli']) {
      await page.locator(id).evaluate((el) => {
        el.textContent = (el.textContent ?? '')
          .replace(/nsk_live_[0-9a-f]{32}/g, 'nsk_live_…')
          .replace(/http:\/\/127\.0\.0\.1:\d+/g, 'http://localhost:8080');
      });
    }
    await page.screenshot({ path: out(name), fullPage: true });
  }
}

/** The real server process (`npm start`'s entry through tsx) on a free port with a fresh accounts file. */
async function startServer(): Promise<{ url: string; stop: () => Promise<void> }> {
  const data = mkdtempSync(path.join(tmpdir(), 'nsfwdetector-pictures-'));
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'services/all-in-one/server.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      TSX_DISABLE_CACHE: '1',
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ACCOUNTS_FILE: path.join(data, 'accounts.db'),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    rmSync(data, { recursive: true, force: true });
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let port = 0;
      let text = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        const listening = /"msg":"listening".*?"port":(\d+)/.exec(text);
        if (listening) port = Number(listening[1]);
        if (port && /^ready — /m.test(text)) resolve(`http://127.0.0.1:${port}`);
      });
      child.once('exit', (code) => reject(new Error(`the server exited (${code}) before it was ready`)));
    });
    return { url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

await main();
