// The admin CLI (`npm run admin -- …`) against the embedded accounts file with the real `npm start`
// process (real model), and against Redis.

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAuthorizer } from '../services/quota/app.ts';
import { loadQuotaConfig } from '../services/quota/config.ts';
import { openStores } from '../services/quota/stores/open-stores.ts';
import { openSqliteAccountStore } from '../services/quota/stores/sqlite-account-store.ts';
import { fixture } from './fixtures/corpus.ts';
import { childEnv } from './support/children.ts';
import { policyMount, policyText } from './support/policy-mount.ts';
import { RedisServer } from './support/redis-server.ts';
import { ROOT, type ServerProcess, startServer } from './support/server-process.ts';
import { describeWithTool, REDIS_SERVER } from './support/tools.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));

interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

function admin(env: Record<string, string>, ...args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'services/admin/cli.ts', ...args],
      { cwd: ROOT, env: childEnv({ ...process.env, TSX_DISABLE_CACHE: '1', ...env }) },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

async function adminJson<T>(env: Record<string, string>, ...args: string[]): Promise<T> {
  const result = await admin(env, ...args, '--json');
  if (result.code !== 0) throw new Error(`admin ${args.join(' ')} failed (${result.code}): ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-admin-'));
const servers: ServerProcess[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

describe('admin CLI with the embedded store and `npm start`', () => {
  const env = { ACCOUNTS_FILE: join(dir, 'accounts.json') };

  it('creates an account and a key that the running server accepts; tier and revocation apply at once; keys survive a restart', async () => {
    const created = await adminJson<{ account: { id: string; tier: string } }>(
      env,
      'create-account',
      '--email',
      'E2E@example.com',
    );
    expect(created.account.tier).toBe('free');
    const issued = await adminJson<{ key: { id: string; prefix: string; last4: string }; secret: string }>(
      env,
      'issue-key',
      'e2e@example.com',
      '--name',
      'first',
    );
    expect(issued.secret).toMatch(/^nsk_live_[0-9a-f]{32}$/);
    expect(readFileSync(env.ACCOUNTS_FILE, 'utf8')).not.toContain(issued.secret);

    const server = await startServer(env);
    servers.push(server);
    const detect = (secret: string) =>
      fetch(`${server.url}/api/open/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${secret}` },
        body: JPEG,
      });

    const first = await detect(issued.secret);
    expect(first.status).toBe(200);
    expect((await first.json()).data.image.format).toBe('jpeg');
    expect(first.headers.get('x-quota-tier')).toBe('free');
    expect(first.headers.get('x-ratelimit-limit')).toBe('100');
    expect(first.headers.get('x-ratelimit-remaining')).toBe('99');

    // The CLI writes the file while the server runs; the server's very next request sees it.
    expect((await admin(env, 'set-tier', created.account.id, 'pro')).code).toBe(0);
    const pro = await detect(issued.secret);
    expect(pro.headers.get('x-quota-tier')).toBe('pro');
    expect(pro.headers.get('x-ratelimit-limit')).toBe('10000');

    const listed = await admin(env, 'list-keys', 'e2e@example.com');
    expect(listed.stdout).toContain(`${issued.key.prefix}…${issued.key.last4}`);
    expect(listed.stdout).not.toContain(issued.secret);
    expect(listed.stdout).not.toMatch(/last used never/);

    expect((await admin(env, 'revoke-key', issued.key.id)).code).toBe(0);
    const revoked = await detect(issued.secret);
    expect(revoked.status).toBe(401);
    expect((await revoked.json()).code).toBe(4011);

    const second = await adminJson<{ secret: string }>(env, 'issue-key', created.account.id);
    expect((await detect(second.secret)).status).toBe(200);

    // Restart: accounts and keys come back from the file.
    expect(await server.stop()).toBe(0);
    const again = await startServer(env);
    servers.push(again);
    const res = await fetch(`${again.url}/api/open/detect`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${second.secret}` },
      body: JPEG,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-quota-tier')).toBe('pro');
  });

  it('explains its mistakes with exit codes: 2 for usage, 1 for not found or taken', async () => {
    expect((await admin(env)).code).toBe(2);
    expect((await admin(env, 'frobnicate')).code).toBe(2);
    expect((await admin(env, 'create-account')).code).toBe(2);
    expect((await admin(env, 'set-tier', 'e2e@example.com', 'gold')).code).toBe(2);
    const missing = await admin(env, 'issue-key', 'nobody@example.com');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no account/);
    expect((await admin(env, 'revoke-key', 'key_ffffffffffffffff')).code).toBe(1);
    const taken = await admin(env, 'create-account', '--email', 'e2e@example.com');
    expect(taken.code).toBe(1);
    expect(taken.stderr).toMatch(/already exists/);
    // Emails are normalised as in the console: a look-alike is the same account, and invisible
    // characters are refused with the reason.
    const lookAlike = await admin(env, 'create-account', '--email', ' Ｅ２Ｅ@EXAMPLE.com');
    expect(lookAlike.code).toBe(1);
    expect(lookAlike.stderr).toMatch(/already exists/);
    expect((await admin(env, 'list-keys', 'Ｅ２Ｅ@Example.COM')).code).toBe(0);
    const invisible = await admin(env, 'create-account', '--email', 'e2e\u200B@example.com');
    expect(invisible.code).toBe(2);
    expect(invisible.stderr).toMatch(/invisible or control character \(U\+200B\)/);
    const usage = await adminJson<{ usage: unknown; note: string }>(env, 'usage', 'e2e@example.com');
    expect(usage.usage).toBeNull();
    expect(usage.note).toMatch(/memory of the running embedded server/);
  });

  it('prunes console sign-ups that never had a key once they are older than --unused-days', async () => {
    const path = join(dir, 'prune.db');
    const store = openSqliteAccountStore(path);
    const unused = await store.createAccount({
      email: 'unused@example.com',
      tier: 'free',
      passwordHash: 'h',
    });
    const keyed = await store.createAccount({ email: 'keyed@example.com', tier: 'free', passwordHash: 'h' });
    const recent = await store.createAccount({
      email: 'recent@example.com',
      tier: 'free',
      passwordHash: 'h',
    });
    await store.createKey(keyed.id);
    await store.close();
    // Forty days old, as a clock would have made them (the store stamps the time of creation).
    const db = new DatabaseSync(path);
    db.prepare('UPDATE accounts SET created_at = ? WHERE id IN (?, ?)').run(
      new Date(Date.now() - 40 * 86_400_000).toISOString(),
      unused.id,
      keyed.id,
    );
    db.close();
    const pruneEnv = { ACCOUNTS_FILE: path };
    expect((await admin(pruneEnv, 'prune-accounts')).code).toBe(2);
    expect(
      (await adminJson<{ pruned: number }>(pruneEnv, 'prune-accounts', '--unused-days', '30')).pruned,
    ).toBe(1);
    const { accounts } = await adminJson<{ accounts: Array<{ id: string }> }>(pruneEnv, 'list-accounts');
    expect(accounts.map((a) => a.id).sort()).toEqual([keyed.id, recent.id].sort());
  });

  it('refuses to start the server on an accounts file that is not ours', async () => {
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, 'not json');
    const server = await startServer({ ACCOUNTS_FILE: bad }, { waitFor: 'nothing' });
    servers.push(server);
    expect(await server.exited).toBe(2);
    expect(server.output()).toMatch(
      /ACCOUNTS_FILE .*bad\.json is neither an accounts database nor an accounts JSON file/,
    );
    expect(readFileSync(bad, 'utf8')).toBe('not json');
  });
});

describeWithTool(REDIS_SERVER, 'admin CLI with Redis', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('manages accounts and keys in Redis and shows live usage', async () => {
    const env = { REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'cli:' };
    const { account } = await adminJson<{ account: { id: string } }>(
      env,
      'create-account',
      '--email',
      'r@example.com',
      '--tier',
      'pro',
    );
    const { secret } = await adminJson<{ secret: string }>(env, 'issue-key', account.id);

    const config = loadQuotaConfig(env);
    const stores = await openStores(config, { required: true });
    try {
      const authorizer = createAuthorizer({ config, ...stores }, console);
      for (let i = 0; i < 3; i++) {
        const decision = await authorizer.authorize({
          endpoint: 'open',
          clientIp: '127.0.0.1',
          authorization: `Bearer ${secret}`,
        });
        expect(decision.allowed).toBe(true);
      }
    } finally {
      await stores.close();
    }

    const usage = await adminJson<{ usage: { day: { used: number; limit: number; remaining: number } } }>(
      env,
      'usage',
      'r@example.com',
    );
    expect(usage.usage.day).toMatchObject({ used: 3, limit: 10_000, remaining: 9_997 });
    const text = await admin(env, 'usage', 'r@example.com');
    expect(text.stdout).toMatch(/today: +3\/10000 used/);

    // With the operator's policy mounted, the limits shown are the policy's, as the servers apply them.
    const mount = policyMount(policyText({ generation: 1, tiers: { pro: { perMinute: 60, perDay: 500 } } }));
    try {
      const withPolicy = await adminJson<{
        limits: { perDay: number };
        usage: { day: { used: number; limit: number } };
      }>({ ...env, POLICY_FILE: mount.file }, 'usage', 'r@example.com');
      expect(withPolicy.limits).toEqual({ perMinute: 60, perDay: 500 });
      expect(withPolicy.usage.day).toMatchObject({ used: 3, limit: 500 });
    } finally {
      mount.remove();
    }
  });

  it('says in one line, exit 1, when the replicas do not confirm a write', async () => {
    // A lone Redis asked for one replica's acknowledgement: the write is applied, never confirmed.
    const env = { REDIS_URL: redis.url, REDIS_KEY_PREFIX: 'cli-wait:', REDIS_WAIT_REPLICAS: '1' };
    const result = await admin(env, 'create-account', '--email', 'w@example.com');
    expect(result.code).toBe(1);
    expect(result.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^not confirmed by the replicas: Written, but acknowledged by 0 of 1 replica.*repeat it if missing$/,
      ),
    ]);
    // Repeated once replicas confirm (here: none asked for), it goes through: nothing half-made blocks it.
    const again = await adminJson<{ account: { email: string } }>(
      { ...env, REDIS_WAIT_REPLICAS: '0' },
      'create-account',
      '--email',
      'w@example.com',
    );
    expect(again.account.email).toBe('w@example.com');
  });

  it('fails clearly when Redis is unreachable', async () => {
    const result = await admin(
      { REDIS_URL: 'redis://127.0.0.1:1', REDIS_CONNECT_TIMEOUT_MS: '200' },
      'list-accounts',
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/cannot open the account store/);
  });
});
