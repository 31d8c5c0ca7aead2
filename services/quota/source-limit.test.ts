// The per-source bound on new edge connections (source-limit.ts) and the rate-limit service Envoy asks
// (rate-limit-service.ts), over a real HTTP/2 connection with the bytes Envoy's network ratelimit filter
// sends. The whole path through a real Envoy: test/e2e/slow-clients.test.ts.

import { connect } from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import {
  RATE_LIMIT_OK,
  RATE_LIMIT_OVER_LIMIT,
  type RateLimitService,
  SHOULD_RATE_LIMIT,
  sourceOf,
  startRateLimitService,
} from './rate-limit-service.ts';
import { startRateLimitWorker } from './rate-limit-worker.ts';
import { SourceConnectionLimiter } from './source-limit.ts';

/** A RateLimitRequest {domain, descriptors: [{entries: [{key, value}…]}]}, as protobuf bytes. */
function rateLimitRequest(domain: string, entries: Array<[string, string]>): Buffer {
  const field = (n: number, bytes: Buffer) =>
    Buffer.concat([Buffer.from([(n << 3) | 2, bytes.length]), bytes]);
  const descriptor = Buffer.concat(
    entries.map(([k, v]) => field(1, Buffer.concat([field(1, Buffer.from(k)), field(2, Buffer.from(v))]))),
  );
  // hits_addend (field 3, varint 1) after the descriptor: fields the service does not read are skipped.
  return Buffer.concat([field(1, Buffer.from(domain)), field(2, descriptor), Buffer.from([0x18, 0x01])]);
}

function framed(message: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

/** One gRPC call: the answer's overall_code (undefined without a message) and grpc-status. */
function shouldRateLimit(
  port: number,
  body: Buffer,
  path = SHOULD_RATE_LIMIT,
): Promise<{ code: number | undefined; status: string }> {
  return new Promise((resolve, reject) => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    const chunks: Buffer[] = [];
    let status = '';
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('trailers', (t) => {
      status = String(t['grpc-status']);
    });
    stream.on('end', () => {
      const out = Buffer.concat(chunks);
      session.close();
      // A RateLimitResponse of one field: overall_code (field 1, varint).
      resolve({ code: out.length >= 7 ? out[6] : undefined, status });
    });
    stream.on('error', reject);
    stream.end(body);
  });
}

describe('SourceConnectionLimiter', () => {
  it('lets a source open its burst at once, then perSecond a second', () => {
    let now = 0;
    const limiter = new SourceConnectionLimiter({ perSecond: 10, burst: 5 }, 64, () => now);
    const admitted = () =>
      Array.from({ length: 20 }, () => limiter.admit('203.0.113.7')).filter(Boolean).length;
    expect(admitted()).toBe(5);
    now += 500; // half a second: 5 more
    expect(admitted()).toBe(5);
    now += 10_000; // never more than the burst, however long it waited
    expect(admitted()).toBe(5);
    expect(limiter.refused).toBe(45);
  });

  it('keeps sources apart; the addresses of one IPv6 /64 are one source, IPv4-mapped is IPv4', () => {
    const limiter = new SourceConnectionLimiter({ perSecond: 1, burst: 2 }, 64, () => 0);
    expect([limiter.admit('2001:db8:1:2::1'), limiter.admit('2001:db8:1:2::ffff')]).toEqual([true, true]);
    expect(limiter.admit('2001:db8:1:2:abcd::9')).toBe(false);
    expect(limiter.admit('2001:db8:1:3::1')).toBe(true);
    expect([limiter.admit('198.51.100.4'), limiter.admit('::ffff:198.51.100.4')]).toEqual([true, true]);
    expect(limiter.admit('198.51.100.4')).toBe(false);
    expect(limiter.admit('198.51.100.5')).toBe(true);
  });

  it('forgets sources past its bound rather than growing without one', () => {
    let now = 0;
    const limiter = new SourceConnectionLimiter({ perSecond: 1, burst: 1 }, 64, () => now);
    for (let i = 0; i < 120_000; i++) {
      limiter.admit(`2001:db8:${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}::1`);
      now += 0.01;
    }
    expect(limiter.sources).toBeLessThanOrEqual(100_000);
  });
});

describe('the rate-limit service Envoy asks', () => {
  let service: RateLimitService | undefined;
  afterEach(async () => {
    await service?.close();
    service = undefined;
  });

  it('reads the source descriptor and answers OK, then OVER_LIMIT past the burst (grpc-status 0)', async () => {
    const limiter = new SourceConnectionLimiter({ perSecond: 1, burst: 2 }, 64, () => 0);
    service = await startRateLimitService(limiter, 0);
    const ask = (address: string) =>
      shouldRateLimit(
        (service as RateLimitService).port,
        framed(rateLimitRequest('edge', [['source', address]])),
      );
    expect(await ask('127.0.0.2')).toEqual({ code: RATE_LIMIT_OK, status: '0' });
    expect(await ask('127.0.0.2')).toEqual({ code: RATE_LIMIT_OK, status: '0' });
    expect(await ask('127.0.0.2')).toEqual({ code: RATE_LIMIT_OVER_LIMIT, status: '0' });
    expect(await ask('127.0.0.3')).toEqual({ code: RATE_LIMIT_OK, status: '0' });
  });

  it('answers an error status, counting nothing, to anything else', async () => {
    const limiter = new SourceConnectionLimiter({ perSecond: 1, burst: 1 }, 64, () => 0);
    service = await startRateLimitService(limiter, 0);
    const { port } = service;
    expect(await shouldRateLimit(port, framed(rateLimitRequest('edge', [['other', 'x']])))).toEqual({
      code: undefined,
      status: '3',
    });
    expect(await shouldRateLimit(port, Buffer.from('not grpc'))).toEqual({ code: undefined, status: '3' });
    expect(await shouldRateLimit(port, Buffer.alloc(0), '/some.Other/Method')).toEqual({
      code: undefined,
      status: '12',
    });
    expect(limiter.admitted + limiter.refused).toBe(0);
  });

  it('runs on a thread of its own, as the quota service starts it, and stops', async () => {
    const worker = await startRateLimitWorker({
      port: 0,
      limits: { perSecond: 1, burst: 1 },
      ipv6PrefixLength: 64,
    });
    try {
      const ask = () =>
        shouldRateLimit(worker.port, framed(rateLimitRequest('edge', [['source', '10.1.2.3']])));
      expect(await ask()).toEqual({ code: RATE_LIMIT_OK, status: '0' });
      expect(await ask()).toEqual({ code: RATE_LIMIT_OVER_LIMIT, status: '0' });
    } finally {
      await worker.close();
    }
  });

  it('finds the source among other descriptors and entries', () => {
    expect(
      sourceOf(
        rateLimitRequest('edge', [
          ['a', 'b'],
          ['source', '2001:db8::1'],
        ]),
      ),
    ).toBe('2001:db8::1');
    expect(sourceOf(rateLimitRequest('edge', []))).toBeUndefined();
  });
});
