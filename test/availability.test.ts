// Availability under hostile clients (slow uploads, many connections), through a real listening socket and
// the real model: the embedded app as `npm start` builds it, in this process so that the test can see
// its work gate. Codes and counts are asserted, never timings.
//
// (a) 30 uploads trickling at ~1 KB/s — one IP's anonymous allowance and two free keys — hold no
//     scoring capacity: other clients' detect calls keep succeeding; past the grace period the
//     trickles are cut with 4001.
// (b) a flood with an unknown key beside legitimate traffic: the flood gets only 401/4011, the others
//     200; a burst of 200 on a free key gets exactly its limit of 200s and 429 for the rest, no 503.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { loadScorer } from '../services/detect/scoring/scoring-pool.ts';
import { fixture } from './fixtures/corpus.ts';
import { embeddedApp } from './support/embedded-app.ts';

const SMALL = readFileSync(fixture('320x240.jpg'));
const LARGE = readFileSync(fixture('2569067123_aca715a2ee_o.jpg'));

type Server = Awaited<ReturnType<typeof embeddedApp>> & { base: string };
let server: Server | undefined;

afterEach(async () => {
  await server?.app.close();
  await server?.model.close();
  server = undefined;
});

/** The embedded app with the real model on 127.0.0.1:0, behind one trusted proxy hop (X-Forwarded-For). */
async function start(env: Record<string, string>): Promise<Server> {
  const built = await embeddedApp({
    env: { TRUSTED_PROXY_HOPS: '1', ANON_PER_MINUTE: '10', ANON_PER_DAY: '30', ...env },
    // A fixed quota clock (2031-03-14T10:00:30Z): no burst straddles two minute windows.
    now: () => Date.UTC(2031, 2, 14, 10, 0, 30),
  });
  built.model.fill(
    await loadScorer(built.config, (err) => {
      throw err;
    }),
  );
  const address = await built.app.listen({ port: 0, host: '127.0.0.1' });
  server = { ...built, base: address };
  return server;
}

interface Answer {
  status: number;
  code: number | undefined;
  message: string;
}

function answerOf(status: number, text: string): Answer {
  try {
    const body = JSON.parse(text) as { code?: number; message?: string };
    return { status, code: body.code, message: body.message ?? '' };
  } catch {
    return { status, code: undefined, message: text };
  }
}

interface Caller {
  ip: string;
  key?: string;
}

function headersOf(caller: Caller, length: number): Record<string, string> {
  return {
    'content-type': 'image/jpeg',
    'content-length': String(length),
    'x-forwarded-for': caller.ip,
    ...(caller.key ? { authorization: `Bearer ${caller.key}` } : {}),
  };
}

function pathOf(caller: Caller): string {
  return caller.key ? '/api/open/detect' : '/api/public/detect';
}

/** One whole request; a connection error is status 0. */
function post(base: string, caller: Caller, body: Buffer): Promise<Answer> {
  return new Promise((resolve) => {
    const req = request(
      `${base}${pathOf(caller)}`,
      { method: 'POST', headers: headersOf(caller, body.length), agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve(answerOf(res.statusCode ?? 0, text)));
        res.on('error', () => resolve({ status: 0, code: undefined, message: 'response error' }));
      },
    );
    req.on('error', (err) => resolve({ status: 0, code: undefined, message: err.message }));
    req.end(body);
  });
}

/** An upload that sends `bytesPerTick` every 100 ms until answered or stopped. */
function trickle(base: string, caller: Caller, body: Buffer, bytesPerTick = 100) {
  let sent = 0;
  let timer: NodeJS.Timeout | undefined;
  const req = request(`${base}${pathOf(caller)}`, {
    method: 'POST',
    headers: headersOf(caller, body.length),
    agent: false,
  });
  const answer = new Promise<Answer | undefined>((resolve) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve(answerOf(res.statusCode ?? 0, text)));
      res.on('error', () => resolve(undefined));
    });
    req.on('error', () => resolve(undefined));
    req.on('close', () => resolve(undefined));
  });
  req.flushHeaders();
  const tick = () => {
    if (sent >= body.length) return;
    req.write(body.subarray(sent, sent + bytesPerTick));
    sent += bytesPerTick;
  };
  tick();
  timer = setInterval(tick, 100);
  void answer.then(() => clearInterval(timer));
  return {
    answer,
    stop: () => {
      clearInterval(timer);
      timer = undefined;
      req.destroy();
    },
  };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 20));
}

async function freeKey(s: Server, tier: 'free' | 'pro' = 'free'): Promise<string> {
  const account = await s.accountStore.createAccount({
    email: `${randomBytes(6).toString('hex')}@example.com`,
    tier,
  });
  return (await s.accountStore.createKey(account.id))?.secret as string;
}

function tally(answers: Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) {
    const key = `${a.status}/${a.code}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

const ATTACKER = '203.0.113.66';
const LEGIT_IPS = ['198.51.100.1', '198.51.100.2', '198.51.100.3', '198.51.100.4', '198.51.100.5'];

describe('slow uploads do not starve scoring (real socket, real model)', () => {
  it('30 trickling uploads from one IP and two free keys leave detect to everyone else', async () => {
    // The rate floor is off here so the trickles stay in flight for the whole test; the next test cuts them.
    const s = await start({ UPLOAD_MIN_BYTES_PER_SECOND: '0' });
    const attackers: Caller[] = [
      { ip: ATTACKER },
      { ip: ATTACKER, key: await freeKey(s) },
      { ip: ATTACKER, key: await freeKey(s) },
    ];
    const trickles = Array.from({ length: 30 }, (_, i) => trickle(s.base, attackers[i % 3] as Caller, LARGE));
    try {
      // Every trickle admitted (10 per client: within the per-client bound) and holding no scoring slot.
      await until(() => s.gate.admitted === 30);
      expect(s.gate.running).toBe(0);

      const pro: Caller = { ip: '198.51.100.9', key: await freeKey(s, 'pro') };
      const legit = await Promise.all([
        ...LEGIT_IPS.flatMap((ip) => [0, 1, 2].map(() => post(s.base, { ip }, SMALL))),
        ...Array.from({ length: 6 }, () => post(s.base, pro, SMALL)),
      ]);
      console.log('legitimate answers beside 30 trickles:', JSON.stringify(tally(legit)));
      expect(tally(legit)).toEqual({ '200/0': 21 });
      // The trickles were in flight throughout, and still are.
      expect(s.gate.admitted).toBe(30);
    } finally {
      for (const t of trickles) t.stop();
    }
    await until(() => s.gate.admitted === 0);
  });

  it('cuts uploads slower than the minimum rate with 4001 once the grace period is over', async () => {
    const s = await start({ UPLOAD_MIN_BYTES_PER_SECOND: '8192', UPLOAD_MIN_RATE_GRACE_MS: '1000' });
    const trickles = Array.from({ length: 3 }, () => trickle(s.base, { ip: ATTACKER }, LARGE));
    try {
      const answers = await Promise.all(trickles.map((t) => t.answer));
      for (const answer of answers) {
        expect(answer).toMatchObject({ status: 400, code: 4001 });
        expect(answer?.message).toMatch(
          /^Upload too slow: \d+ bytes in [\d.]+ s, below the minimum of 8192 bytes\/s$/,
        );
      }
    } finally {
      for (const t of trickles) t.stop();
    }
    await until(() => s.gate.admitted === 0);
  });
});

describe('unauthenticated and over-limit requests take no capacity (real socket, real model)', () => {
  it('an unknown-key flood gets only 401/4011 while legitimate clients get 200', async () => {
    const s = await start({});
    const pro: Caller = { ip: '198.51.100.9', key: await freeKey(s, 'pro') };
    let sent = 0;
    const flood: Answer[] = [];
    const flooder = async () => {
      while (sent < 300) {
        sent += 1;
        const key = `nsk_live_${randomBytes(16).toString('hex')}`;
        flood.push(await post(s.base, { ip: ATTACKER, key }, SMALL));
      }
    };
    const legitimate = Promise.all([
      ...LEGIT_IPS.flatMap((ip) => [0, 1, 2, 3].map(() => post(s.base, { ip }, SMALL))),
      ...Array.from({ length: 8 }, () => post(s.base, pro, SMALL)),
    ]);
    const [legit] = await Promise.all([legitimate, Promise.all(Array.from({ length: 48 }, flooder))]);
    console.log('flood:', JSON.stringify(tally(flood)), 'legitimate:', JSON.stringify(tally(legit)));
    expect(tally(flood)).toEqual({ '401/4011': 300 });
    expect(tally(legit)).toEqual({ '200/0': 28 });
  });

  it('a burst of 200 on a free key: exactly its limit of 200s, 429 for the rest, no 503', async () => {
    const s = await start({ FREE_PER_MINUTE: '10', FREE_PER_DAY: '100' });
    const caller: Caller = { ip: '198.51.100.7', key: await freeKey(s) };
    const burst = await Promise.all(Array.from({ length: 200 }, () => post(s.base, caller, SMALL)));
    const counts = tally(burst);
    console.log('burst of 200 on a free key:', JSON.stringify(counts));
    expect(counts).toEqual({ '200/0': 10, '429/4290': 190 });
  });
});
