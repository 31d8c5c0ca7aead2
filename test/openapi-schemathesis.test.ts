// schemathesis against the LIVE embedded server (`npm start`'s entry point on port 0): it reads
// /openapi.json, generates requests for every operation (multipart and raw image bodies, headers, bad
// methods…) and fails on any 5xx and on any answer the document does not describe (status, media
// type, headers, body schema). Limits are raised so rate limiting cannot stand in for real answers.
// Needs schemathesis (.ci/install-tools.sh); under CI=true a missing one fails the suite.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { TOOLS_DIR } from '../tools/stack/tools.ts';
import { bmpFromRgb } from './fixtures/bmp.ts';
import { fixture } from './fixtures/corpus.ts';
import { type Child, spawnChild } from './support/children.ts';
import { describeWithTool, tool } from './support/tools.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const SCHEMATHESIS_VERSION = '4.32.5';
const ST = join(TOOLS_DIR, `schemathesis-${SCHEMATHESIS_VERSION}`, 'bin', 'st');
const SCHEMATHESIS = tool(`schemathesis ${SCHEMATHESIS_VERSION}`, 'bash .ci/install-tools.sh', { path: ST });
const run = promisify(execFile);
const HOOKS = join(ROOT, 'test', 'schemathesis', 'real_images.py');

const HIGH = '1000000';
const limits = {
  ANON_PER_MINUTE: HIGH,
  ANON_PER_DAY: HIGH,
  FREE_PER_MINUTE: HIGH,
  FREE_PER_DAY: HIGH,
  PRO_PER_MINUTE: HIGH,
  PRO_PER_DAY: HIGH,
};

interface HarLog {
  log: { entries: { request: { url: string }; response: { status: number } }[] };
}

describeWithTool(SCHEMATHESIS, 'schemathesis against the live embedded server', () => {
  let dir: string;
  let server: Child | undefined;
  let baseUrl: string;
  let apiKey: string;
  let output = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-schemathesis-'));
    const env = {
      ...process.env,
      ...limits,
      ACCOUNTS_FILE: join(dir, 'accounts.json'),
      TSX_DISABLE_CACHE: '1',
    };
    const admin = async (...args: string[]) => {
      const { stdout } = await run(
        process.execPath,
        ['--import', 'tsx', 'services/admin/cli.ts', ...args, '--json'],
        {
          cwd: ROOT,
          env,
        },
      );
      return JSON.parse(stdout);
    };
    await admin('create-account', '--email', 'fuzz@example.com', '--tier', 'pro');
    apiKey = (await admin('issue-key', 'fuzz@example.com', '--name', 'schemathesis')).secret;

    let announce: (url: string) => void = () => {};
    const ready = new Promise<string>((resolve) => {
      announce = resolve;
    });
    server = spawnChild('npm start', process.execPath, ['--import', 'tsx', 'services/all-in-one/server.ts'], {
      cwd: ROOT,
      env: { ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
      onOutput: (chunk) => {
        output += chunk;
        const line = /^ready — (http:\/\/\S+) is scoring images/m.exec(output);
        if (line?.[1]) announce(line[1]);
      },
    });
    baseUrl = await Promise.race([
      ready,
      server.exited.then((code) => {
        throw new Error(`server exited (${code}) before ready:\n${output}`);
      }),
    ]);
  }, 180_000);

  afterAll(async () => {
    await server?.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('finds no 5xx and no answer outside /openapi.json', async () => {
    const args = [
      'run',
      `${baseUrl}/openapi.json`,
      '--checks',
      'not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance',
      '--header',
      `Authorization: Bearer ${apiKey}`,
      '--max-examples',
      '40',
      '--workers',
      '1',
      '--request-timeout',
      '60',
      '--no-color',
    ];
    // Real images per media type for the hooks (BMP: none in the corpus, so one is built).
    const bmp = join(dir, 'grey.bmp');
    writeFileSync(bmp, bmpFromRgb(new Uint8Array(16 * 16 * 3).fill(128), 16, 16));
    const images = join(dir, 'images.json');
    writeFileSync(
      images,
      JSON.stringify({
        'image/jpeg': [fixture('320x240.jpg')],
        'image/png': [fixture('2x2_fdcce6.png'), fixture('Flag_of_the_Netherlands-alpha.png')],
        'image/webp': [fixture('5_webp_a.webp')],
        'image/bmp': [bmp],
        'image/tiff': [fixture('8bit_depth.tiff')],
        'image/gif': [fixture('Crash_test.gif')],
      }),
    );
    const har = join(dir, 'run.har');
    args.push('--report-har-path', har);
    let code = 0;
    let stdout = '';
    let stderr = '';
    try {
      ({ stdout, stderr } = await run(ST, args, {
        cwd: dir,
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, NO_COLOR: '1', SCHEMATHESIS_HOOKS: HOOKS, NSFWDETECTOR_FUZZ_IMAGES: images },
      }));
    } catch (err) {
      const failed = err as { code?: number; stdout?: string; stderr?: string };
      code = failed.code ?? 1;
      stdout = failed.stdout ?? '';
      stderr = failed.stderr ?? '';
    }
    // schemathesis' own summary in the test output, pass or fail.
    const at = stdout.indexOf('SUMMARY');
    const summary = at < 0 ? stdout : stdout.slice(stdout.lastIndexOf('\n', at) + 1);
    console.log(`schemathesis ${SCHEMATHESIS_VERSION} against ${baseUrl}:\n${summary}`);
    expect(code, `schemathesis failed:\n${stdout}\n${stderr}\nserver output:\n${output}`).toBe(0);
    expect(stdout).toMatch(/\d+ generated, \d+ passed/);
    expect(stdout).not.toMatch(/\d+ failed/);
    // The fuzz reached the scoring path of both detect endpoints, so 200 answers were checked too.
    const entries = (JSON.parse(readFileSync(har, 'utf8')) as HarLog).log.entries;
    const byStatus = new Map<number, number>();
    for (const e of entries) byStatus.set(e.response.status, (byStatus.get(e.response.status) ?? 0) + 1);
    console.log(
      `answers by status: ${[...byStatus]
        .sort(([a], [b]) => a - b)
        .map(([status, n]) => `${status}×${n}`)
        .join(', ')}`,
    );
    for (const path of ['/api/public/detect', '/api/open/detect']) {
      const scored = entries.filter(
        (e) => new URL(e.request.url).pathname === path && e.response.status === 200,
      );
      expect(scored.length, `200 answers from ${path}`).toBeGreaterThan(0);
    }
    // The server neither crashed nor logged a failure while being fuzzed.
    expect(server?.running()).toBe(true);
  }, 600_000);
});
