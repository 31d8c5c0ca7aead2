// The embedded account store at 1k, 100k and 1M accounts: does a sign-up or a key-endpoint detect cost
// more as accounts pile up, and does the server's memory grow with them? A database per size (accounts
// created in bulk through the store, each with a key); the real server (`npm start`'s entry,
// ACCOUNTS_FILE on that database) answers console sign-ups and key detects one at a time, started on
// each size in turn, twice, and its peak RSS (VmHWM) is read. Beside them, the store's own
// createAccount and resolveKey, in this process. `npx tsx bench/accounts.ts` runs it alone (BENCH_ACCOUNTS_SIZES=
// 1000,100000 to choose the sizes); `npm run bench -- --only accounts` too.
// Then the write-ahead log under key traffic: 100k key-authenticated authorize() calls (the decision
// every key detect takes, recording each key's last use) on a database of 1,000 accounts, 10 ms of
// clock apart (1,000 s: every key's last use is due again every minute), the log's largest size read
// after every call, against the log left by building the database (the baseline, same run).

import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import sharp from 'sharp';
import { QuotaAuthorizer } from '../services/quota/authorize.ts';
import { MemoryQuotaStore } from '../services/quota/stores/memory-quota-store.ts';
import { openSqliteAccountStore } from '../services/quota/stores/sqlite-account-store.ts';
import { startServer } from '../test/support/server-process.ts';
import { percentile } from './http-load.ts';

const SIZES = (process.env.BENCH_ACCOUNTS_SIZES ?? '1000,100000,1000000').split(',').map(Number);
/** Per server start; each size's server starts ROUNDS times, in turn with the other sizes'. */
const SIGNUPS = Number(process.env.BENCH_ACCOUNTS_SIGNUPS ?? 20);
const DETECTS = Number(process.env.BENCH_ACCOUNTS_DETECTS ?? 200);
const ROUNDS = Number(process.env.BENCH_ACCOUNTS_ROUNDS ?? 2);
const STORE_OPS = 2000;
/** Keys kept to call with, spread over the whole store. */
const SAMPLE = 512;
const HIGH = '100000000';
const MiB = 1024 * 1024;

interface Figures {
  size: number;
  signup: { p50: number; p99: number };
  detect: { p50: number; p99: number };
  create: { p50: number; p99: number };
  resolve: { p50: number; p99: number };
  rssPeakMiB: number;
  bytesPerAccount: number;
  bulkSeconds: number;
}

function summary(ms: number[]): { p50: number; p99: number } {
  const sorted = [...ms].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]) * 1024;
}

/** Every file of the database (WAL included), in bytes. */
function databaseBytes(path: string): number {
  let total = 0;
  for (const suffix of ['', '-wal']) {
    try {
      total += statSync(`${path}${suffix}`).size;
    } catch {
      // no WAL at the moment
    }
  }
  return total;
}

async function measureServer(path: string, secrets: string[], tag: string) {
  const server = await startServer({
    ACCOUNTS_FILE: path,
    LOG_LEVEL: 'warn',
    // Each sign-up from its own address (the per-address limit is 5 a minute), told by one proxy hop.
    TRUSTED_PROXY_HOPS: '1',
    FREE_PER_MINUTE: HIGH,
    FREE_PER_DAY: HIGH,
    SIGNUP_PER_MINUTE: HIGH,
    SIGNUP_PER_DAY: HIGH,
  });
  try {
    // A small image: the account path, not the inference, is what this measures.
    const image = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#777' } })
      .jpeg()
      .toBuffer();
    const detect = async (i: number) => {
      const started = performance.now();
      const res = await fetch(`${server.url}/api/open/detect`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${secrets[(i * 7919) % secrets.length]}`,
          'content-type': 'image/jpeg',
        },
        body: image,
      });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`detect answered ${res.status}`);
      return performance.now() - started;
    };
    // Warm-up: past the first requests' compilation, so every size is measured on a warm server.
    for (let i = 0; i < 100; i++) await detect(i);
    const detects: number[] = [];
    for (let i = 0; i < DETECTS; i++) detects.push(await detect(i));
    const signups: number[] = [];
    for (let i = 0; i < SIGNUPS; i++) {
      const started = performance.now();
      const res = await fetch(`${server.url}/console/api/signup`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': `10.${i >> 8}.${i & 255}.7` },
        body: JSON.stringify({
          email: `bench-signup-${tag}-${i}@example.com`,
          password: 'a bench password',
        }),
      });
      await res.arrayBuffer();
      if (res.status !== 202) throw new Error(`sign-up answered ${res.status}`);
      signups.push(performance.now() - started);
    }
    return { signups, detects, rssPeak: peakRss(server.proc.pid as number) };
  } finally {
    await server.stop();
  }
}

interface Database {
  size: number;
  path: string;
  /** Keys to call with, drawn evenly from all its accounts. */
  secrets: string[];
  bulkSeconds: number;
  create: { p50: number; p99: number };
  resolve: { p50: number; p99: number };
}

/** A database of `size` accounts with a key each, and the store's own call costs on it. */
async function buildDatabase(dir: string, size: number): Promise<Database> {
  const path = join(dir, `accounts-${size}.db`);
  const store = openSqliteAccountStore(path);
  const secrets: string[] = [];
  const started = performance.now();
  store.bulkCreateAccounts(
    size,
    (i) => `bench-${i}@example.com`,
    (i, secret) => {
      // Reservoir sampling: SAMPLE keys, each account equally likely.
      if (i < SAMPLE) secrets.push(secret);
      else {
        const j = Math.floor(Math.random() * (i + 1));
        if (j < SAMPLE) secrets[j] = secret;
      }
    },
  );
  const bulkSeconds = (performance.now() - started) / 1000;
  const creates: number[] = [];
  for (let i = 0; i < STORE_OPS / 10; i++) {
    const t = performance.now();
    await store.createAccount({ email: `bench-store-${i}@example.com`, tier: 'free' });
    creates.push(performance.now() - t);
  }
  const resolves: number[] = [];
  for (let i = 0; i < STORE_OPS; i++) {
    const t = performance.now();
    if (!(await store.resolveKey(secrets[(i * 7919) % secrets.length] as string)))
      throw new Error('a bench key did not resolve');
    resolves.push(performance.now() - t);
  }
  await store.close();
  console.log(`accounts ${size.toLocaleString('en')}: created in ${bulkSeconds.toFixed(1)} s`);
  return { size, path, secrets, bulkSeconds, create: summary(creates), resolve: summary(resolves) };
}

const LOG_CALLS = Number(process.env.BENCH_ACCOUNTS_LOG_CALLS ?? 100_000);
const LOG_ACCOUNTS = 1000;
const LOG_STEP_MS = 10;

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** The log under key traffic (see the file's header): one line. */
async function logUnderKeyTraffic(dir: string): Promise<string> {
  const path = join(dir, 'accounts-log.db');
  const store = openSqliteAccountStore(path);
  const secrets: string[] = [];
  store.bulkCreateAccounts(
    LOG_ACCOUNTS,
    (i) => `log-${i}@example.com`,
    (_i, secret) => secrets.push(secret),
  );
  const baseline = fileBytes(`${path}-wal`);
  let clock = Date.UTC(2031, 0, 1);
  const now = () => clock;
  const high = { perMinute: 1e9, perDay: 1e9 };
  const touches: Promise<void>[] = [];
  // The store as it is, its touchKey calls counted (and awaited at the end).
  const counting = new Proxy(store, {
    get(target, prop) {
      if (prop === 'touchKey')
        return (keyId: string, at?: Date) => {
          const done = target.touchKey(keyId, at);
          touches.push(done);
          return done;
        };
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const authorizer = new QuotaAuthorizer({
    quotaStore: new MemoryQuotaStore(now),
    accountStore: counting,
    limits: () => ({ anonymous: high, tiers: { free: high, pro: high } }),
    now,
  });
  let largest = baseline;
  const started = performance.now();
  for (let i = 0; i < LOG_CALLS; i++) {
    const secret = secrets[(i * 7919) % secrets.length] as string;
    const decision = await authorizer.authorize({
      endpoint: 'open',
      clientIp: '127.0.0.1',
      authorization: `Bearer ${secret}`,
    });
    if (!decision.allowed) throw new Error('a bench key was refused');
    clock += LOG_STEP_MS;
    largest = Math.max(largest, fileBytes(`${path}-wal`));
  }
  await Promise.all(touches);
  const seconds = (performance.now() - started) / 1000;
  const after = fileBytes(`${path}-wal`);
  const db = fileBytes(path);
  await store.close();
  return `write-ahead log under key traffic: ${LOG_CALLS.toLocaleString('en')} authorize() calls with keys of ${LOG_ACCOUNTS.toLocaleString('en')} accounts over ${(LOG_CALLS * LOG_STEP_MS) / 1000} s of clock (${seconds.toFixed(1)} s), ${touches.length.toLocaleString('en')} last-use writes: WAL largest ${(largest / MiB).toFixed(2)} MiB, at the end ${(after / MiB).toFixed(2)} MiB (baseline after building the database: ${(baseline / MiB).toFixed(2)} MiB; target under 8 MiB); database ${(db / MiB).toFixed(2)} MiB`;
}

export async function accountsBench(): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-bench-accounts-'));
  const results: Figures[] = [];
  let logLine = '';
  try {
    const databases: Database[] = [];
    logLine = await logUnderKeyTraffic(dir);
    for (const size of SIZES) databases.push(await buildDatabase(dir, size));
    // The server at each size in turn, ROUNDS times: the machine's drift and the first server's
    // warm-up weigh on every size alike.
    const samples = databases.map(() => ({ signups: [] as number[], detects: [] as number[], rssPeak: 0 }));
    let round = 0;
    for (let r = 0; r < ROUNDS; r++) {
      for (const [i, db] of databases.entries()) {
        const measured = await measureServer(db.path, db.secrets, `${db.size}-${round++}`);
        const sample = samples[i] as (typeof samples)[number];
        sample.signups.push(...measured.signups);
        sample.detects.push(...measured.detects);
        sample.rssPeak = Math.max(sample.rssPeak, measured.rssPeak);
      }
    }
    for (const [i, db] of databases.entries()) {
      const sample = samples[i] as (typeof samples)[number];
      results.push({
        size: db.size,
        signup: summary(sample.signups),
        detect: summary(sample.detects),
        create: db.create,
        resolve: db.resolve,
        rssPeakMiB: sample.rssPeak / MiB,
        bytesPerAccount: databaseBytes(db.path) / db.size,
        bulkSeconds: db.bulkSeconds,
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const ms = (x: { p50: number; p99: number }, digits = 1) =>
    `p50 ${x.p50.toFixed(digits)} ms, p99 ${x.p99.toFixed(digits)} ms`;
  const lines = [
    `embedded accounts (SQLite), one at a time: console sign-up (scrypt included), key detect (64×64 JPEG), store calls in process; per size ${ROUNDS * SIGNUPS} sign-ups and ${ROUNDS * DETECTS} detects over ${ROUNDS} server starts taken in turn with the other sizes', ${STORE_OPS / 10} createAccount, ${STORE_OPS} resolveKey`,
  ];
  for (const r of results)
    lines.push(
      `  ${r.size.toLocaleString('en').padStart(9)} accounts: sign-up ${ms(r.signup)}; key detect ${ms(r.detect)}; createAccount ${ms(r.create, 3)}; resolveKey ${ms(r.resolve, 3)}; server peak RSS ${r.rssPeakMiB.toFixed(0)} MiB; ${r.bytesPerAccount.toFixed(0)} B/account on disk`,
    );
  lines.push(logLine);
  const first = results[0];
  const last = results.at(-1);
  if (first && last && last !== first) {
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
    lines.push(
      `  ${last.size.toLocaleString('en')} vs ${first.size.toLocaleString('en')}: sign-up p50 ${ratio(last.signup.p50, first.signup.p50)} p99 ${ratio(last.signup.p99, first.signup.p99)}; key detect p50 ${ratio(last.detect.p50, first.detect.p50)} p99 ${ratio(last.detect.p99, first.detect.p99)}; peak RSS ${ratio(last.rssPeakMiB, first.rssPeakMiB)}  (target: within 2×, RSS flat)`,
    );
  }
  return lines;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const line of await accountsBench()) console.log(line);
}
