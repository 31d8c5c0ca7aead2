// schemathesis against the LIVE embedded server (`npm start`'s entry point on port 0): it reads
// /openapi.json, generates requests for every operation (multipart and raw image bodies, headers, bad
// methods…) and fails on any 5xx and on any answer the document does not describe (status, media
// type, headers, body schema). Limits are raised so rate limiting cannot stand in for real answers.
// Needs schemathesis (.ci/install-tools.sh); under CI=true a missing one fails the suite.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const SCHEMATHESIS_VERSION = '4.32.5';
const TOOLS = process.env.TOOLS_CACHE ?? join(homedir(), '.cache', 'nsfwdetector-tools');
const ST = join(TOOLS, `schemathesis-${SCHEMATHESIS_VERSION}`, 'bin', 'st');
const INSTALL_HINT = 'bash .ci/install-tools.sh';
const run = promisify(execFile);

const HIGH = '1000000';
const limits = {
  ANON_PER_MINUTE: HIGH,
  ANON_PER_DAY: HIGH,
  FREE_PER_MINUTE: HIGH,
  FREE_PER_DAY: HIGH,
  PRO_PER_MINUTE: HIGH,
  PRO_PER_DAY: HIGH,
};

function describeSchemathesis(name: string, body: () => void) {
  if (existsSync(ST)) return describe(name, body);
  if (process.env.CI === 'true') {
    return describe(name, () => {
      it('needs schemathesis', () => {
        throw new Error(`schemathesis ${SCHEMATHESIS_VERSION} is not installed at ${ST}: ${INSTALL_HINT}`);
      });
    });
  }
  console.warn(`[skipped] ${name}: schemathesis is not installed. Install it with: ${INSTALL_HINT}`);
  return describe.skip(name, body);
}

describeSchemathesis('schemathesis against the live embedded server', () => {
  let dir: string;
  let server: ChildProcess | undefined;
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
        ['--import', 'tsx', 'services/quota/admin-cli.ts', ...args, '--json'],
        {
          cwd: ROOT,
          env,
        },
      );
      return JSON.parse(stdout);
    };
    await admin('create-account', '--email', 'fuzz@example.com', '--tier', 'pro');
    apiKey = (await admin('issue-key', 'fuzz@example.com', '--name', 'schemathesis')).secret;

    // Its own process group, so the whole tree goes on cleanup even if start-up fails.
    server = spawn(process.execPath, ['--import', 'tsx', 'services/all-in-one/server.ts'], {
      cwd: ROOT,
      env: { ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    baseUrl = await new Promise<string>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk;
        const ready = /ready — detect is scoring at (http:\/\/\S+)/.exec(output);
        if (ready?.[1]) resolve(ready[1]);
      };
      server?.stdout?.on('data', onData);
      server?.stderr?.on('data', (chunk: Buffer) => (output += chunk));
      server?.once('exit', (code) => reject(new Error(`server exited (${code}) before ready:\n${output}`)));
    });
  }, 180_000);

  afterAll(() => {
    if (server?.pid !== undefined && server.exitCode === null) {
      try {
        process.kill(-server.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
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
    let code = 0;
    let stdout = '';
    let stderr = '';
    try {
      ({ stdout, stderr } = await run(ST, args, {
        cwd: dir,
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, NO_COLOR: '1' },
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
    // The server neither crashed nor logged a failure while being fuzzed.
    expect(server?.exitCode).toBeNull();
  }, 600_000);
});
