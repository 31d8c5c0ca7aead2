// Logs an operator can read under attack: floods of refusals through a real
// listening server with its real logger, writing to a stream captured here.

import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import Fastify from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import { RefusalLog } from '../../lib/common/refusal-log.ts';
import { fixture } from '../../test/fixtures/corpus.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { InProcessScorer } from '../detect/scoring/image-scorer.ts';
import { ScorerSlot } from '../detect/scoring/scorer-slot.ts';
import { MemoryQuotaStore } from '../quota/stores/memory-quota-store.ts';
import { memoryAccountStore } from '../quota/stores/sqlite-account-store.ts';
import { buildEmbeddedApp } from './app.ts';
import { loadAllInOneConfig } from './config.ts';

interface LogLine {
  level: number;
  msg: string;
  refused?: Record<string, number>;
  err?: { stack?: string };
}

/** A real embedded server whose log lines land in `lines` (raw text in `text()`). */
async function server(env: Record<string, string>, withModel: boolean) {
  const config = loadAllInOneConfig({ LOG_LEVEL: 'info', ...env });
  const model = new ScorerSlot();
  if (withModel) model.fill(new InProcessScorer(new FakeClassifier(), config.limits));
  const chunks: string[] = [];
  const logStream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const accountStore = memoryAccountStore();
  const { app } = await buildEmbeddedApp({
    config,
    model,
    // A fixed quota clock (2031-03-14T10:00:30Z): a flood cannot straddle two minutes.
    quotaStore: new MemoryQuotaStore(() => Date.UTC(2031, 2, 14, 10, 0, 30)),
    accountStore,
    sessionStore: accountStore,
    logStream,
  });
  // A real fault, for contrast: an unexpected exception.
  app.get('/test/fault', async () => {
    throw new Error('unexpected fault for the test');
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const text = () => chunks.join('');
  const lines = () =>
    text()
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as LogLine);
  return { app, base, text, lines };
}

const image = readFileSync(fixture('320x240.jpg'));

async function flood(n: number, send: () => Promise<Response>): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  for (let i = 0; i < n; i += 25) {
    const batch = await Promise.all(Array.from({ length: Math.min(25, n - i) }, send));
    for (const res of batch) {
      await res.arrayBuffer();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
  }
  return statuses;
}

function summed(lines: LogLine[], code: number): number {
  return lines.reduce((sum, l) => sum + (l.refused?.[String(code)] ?? 0), 0);
}

describe('refusals are counted, not logged one by one', () => {
  it('401 and 429 floods: a few summary lines, no stack, level ≤ warn; a real fault keeps its stack', async () => {
    const { app, base, text, lines } = await server({ ANON_PER_MINUTE: '5', ANON_PER_DAY: '100000' }, true);
    const detect = (headers: Record<string, string>) => () =>
      fetch(`${base}/api/public/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg', ...headers },
        body: image,
      });
    const unknownKey = await flood(300, () =>
      fetch(`${base}/api/open/detect`, {
        method: 'POST',
        headers: {
          'content-type': 'image/jpeg',
          authorization: 'Bearer nsfw_unknownkeyunknownkeyunknownkey',
        },
        body: image,
      }),
    );
    const anonymous = await flood(300, detect({}));
    const fault = await fetch(`${base}/test/fault`);
    expect(fault.status).toBe(503);
    await app.close(); // flushes the last summary

    expect(unknownKey.get(401)).toBe(300);
    expect(anonymous.get(429)).toBeGreaterThanOrEqual(290);

    const all = lines();
    const faults = all.filter((l) => l.level >= 50);
    const others = all.filter((l) => l.level < 50);
    const bytes = Buffer.byteLength(text());
    console.log(`600 refusals + 1 fault → ${all.length} log lines, ${bytes} bytes`);
    // The counts are all there, in a handful of lines.
    expect(summed(all, 4011)).toBe(300);
    expect(summed(all, 4290)).toBe(anonymous.get(429));
    expect(others.length).toBeLessThanOrEqual(6);
    for (const line of others) {
      expect(line.level).toBeLessThanOrEqual(40);
      expect(JSON.stringify(line)).not.toMatch(/stack|\n\s+at /);
    }
    // The one unexpected exception: logged at error, with its stack.
    expect(faults).toHaveLength(1);
    expect(faults[0]?.err?.stack).toMatch(/unexpected fault for the test/);
    expect(bytes).toBeLessThan(8 * 1024);
  });

  it('a 503 flood (model not loaded): one warn summary with a sample reason, no stack', async () => {
    const { app, base, lines } = await server({ ANON_PER_MINUTE: '100000', ANON_PER_DAY: '100000' }, false);
    const statuses = await flood(200, () =>
      fetch(`${base}/api/public/detect`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg' },
        body: image,
      }),
    );
    await app.close();
    expect(statuses.get(503)).toBe(200);
    const all = lines();
    const summaries = all.filter((l) => l.msg === 'requests refused');
    expect(summed(all, 5001)).toBe(200);
    expect(summaries.length).toBeGreaterThanOrEqual(1);
    expect(summaries.length).toBeLessThanOrEqual(3);
    for (const line of all) {
      expect(line.level).toBeLessThanOrEqual(40);
      expect(JSON.stringify(line)).not.toMatch(/stack/);
    }
    expect(summaries.some((l) => l.level === 40)).toBe(true);
  });
});

/** A RefusalLog writing to memory; `lines()` parses what it wrote. */
function capturedRefusalLog(intervalMs: number) {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  const { log } = Fastify({ logger: { level: 'info', stream } });
  const lines = () =>
    chunks
      .join('')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as LogLine);
  return { refusals: new RefusalLog(log, intervalMs), lines };
}

describe('RefusalLog', () => {
  it('a sustained flood writes one line per interval, whatever its rate', () => {
    vi.useFakeTimers();
    try {
      const { refusals, lines: logged } = capturedRefusalLog(100);
      // 550 ms of a flood (500 refusals every 5 ms), on the fake clock.
      let recorded = 0;
      for (let t = 0; t < 550; t += 5) {
        for (let i = 0; i < 500; i++) refusals.record(i % 2 ? 4011 : 5001, 'Overloaded');
        recorded += 500;
        vi.advanceTimersByTime(5);
      }
      refusals.flush();
      const lines = logged();
      // One line at 100, 200, 300, 400 and 500 ms, and one for the rest when flushed.
      expect(lines).toHaveLength(6);
      expect(recorded).toBe(55_000);
      expect(lines.reduce((sum, l) => sum + (l.refused?.['4011'] ?? 0) + (l.refused?.['5001'] ?? 0), 0)).toBe(
        recorded,
      );
      for (const line of lines) expect(line.level).toBe(40);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a fault behind 5xx refusals (e.g. the quota store down) is logged with its stack once per interval', () => {
    const { refusals, lines: logged } = capturedRefusalLog(60_000);
    for (let i = 0; i < 1000; i++)
      refusals.record(5001, 'Connection is closed.', new Error('Connection is closed.'));
    refusals.flush();
    const lines = logged();
    expect(lines).toHaveLength(2);
    expect(lines[0]?.level).toBe(50);
    expect(lines[0]?.err?.stack).toMatch(/Connection is closed/);
    expect(lines[1]).toMatchObject({ level: 40, refused: { 5001: 1000 }, msg: 'requests refused' });
  });
});
