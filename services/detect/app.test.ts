// The detect endpoint's HTTP contract (spec 2, 4.1, 7, 8) through Fastify inject, with a fake model.

import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { type AddressInfo, connect } from 'node:net';
import { PassThrough } from 'node:stream';
import sharp from 'sharp';
import { afterEach, describe, expect, it } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { hostileImage } from '../../test/support/hostile-images.ts';
import { multipart } from '../../test/support/multipart.ts';
import { DEFAULT_DIMENSION_LIMITS } from './image/types.ts';
import { DecoderPool } from './scoring/decoder-pool.ts';
import { InProcessScorer, type ScorerState } from './scoring/image-scorer.ts';
import { RoutedScorer } from './scoring/routed-scorer.ts';
import { WorkerPoolScorer } from './scoring/worker-pool-scorer.ts';

const JPEG = readFileSync(fixture('320x240.jpg'));
const PNG = readFileSync(fixture('Flag_of_the_Netherlands.png'));
const SVG = readFileSync(fixture('circle.svg'));
const DETECT = '/api/public/detect';

type App = Awaited<ReturnType<typeof embeddedApp>>;
let current: App | undefined;

// 2031-03-14T10:00:30Z: half way through a minute, 50 370 s before UTC midnight.
const T0 = Date.UTC(2031, 2, 14, 10, 0, 30);

async function start(
  env: Record<string, string> = {},
  classifier = new FakeClassifier(),
  now: () => number = () => T0,
) {
  current = await embeddedApp({ env, classifier, now });
  return { ...current, classifier };
}

afterEach(async () => {
  await current?.app.close();
  current = undefined;
});

function raw(app: App['app'], body: Buffer, contentType: string, headers: Record<string, string> = {}) {
  return app.inject({
    method: 'POST',
    url: DETECT,
    payload: body,
    headers: { 'content-type': contentType, ...headers },
  });
}

function form(app: App['app'], parts: Parameters<typeof multipart>[0], headers: Record<string, string> = {}) {
  const { body, contentType } = multipart(parts);
  return app.inject({
    method: 'POST',
    url: DETECT,
    payload: body,
    headers: { 'content-type': contentType, ...headers },
  });
}

/** Waits for a condition the server reaches on its own (no timing asserted). */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

function expectError(res: { statusCode: number; json: () => unknown }, status: number, code: number) {
  expect(res.statusCode).toBe(status);
  const body = res.json() as Record<string, unknown>;
  expect(Object.keys(body).sort()).toEqual(['code', 'message']);
  expect(body.code).toBe(code);
  expect(typeof body.message).toBe('string');
  expect((body.message as string).length).toBeGreaterThan(3);
}

describe('successful detection', () => {
  it('answers the full result for a multipart upload', async () => {
    const { app } = await start();
    const res = await form(app, [
      { name: 'file', filename: 'x.bin', data: JPEG, contentType: 'application/pdf' },
    ]);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ code: 0, message: 'ok' });
    expect(body.data).toEqual({
      decision: 'allow',
      scores: { nsfw: 0, sfw: 1 },
      thresholds: { allow: 0.1, block: 0.9 },
      image: {
        sha256: '5190df4a3d6b41942c71fb28e6d8b3d0943706726ce0fd0425e5a4d3c38eca02',
        format: 'jpeg',
        width: 320,
        height: 240,
        bytes: JPEG.length,
        frames: 1,
        frames_scored: 1,
        decisive_frame: 0,
      },
      matches: [],
      timing_ms: expect.any(Number),
      model: 'mobilenet_v2',
      classes: { drawing: 0, hentai: 0, neutral: 1, porn: 0, sexy: 0 },
    });
    expect(body.data.timing_ms).toBeGreaterThanOrEqual(0);
  });

  it('answers the same for a raw image body, and accepts image/jpg', async () => {
    const { app, classifier } = await start();
    for (const type of ['image/jpeg', 'image/jpg', 'IMAGE/JPEG; charset=binary']) {
      const res = await raw(app, JPEG, type);
      expect(res.statusCode).toBe(200);
      expect(res.json().data.image).toMatchObject({ format: 'jpeg', bytes: JPEG.length });
    }
    expect(classifier.lastInputLength).toBe(224 * 224 * 3);
  });

  it('accepts a part named file without a filename, and ignores other text fields', async () => {
    const { app } = await start();
    const res = await form(app, [
      { name: 'note', data: 'hello' },
      { name: 'file', data: PNG },
    ]);
    expect(res.statusCode).toBe(200);
    expect(res.json().data.image.format).toBe('png');
  });

  it.each([
    [{ porn: 0.05, hentai: 0.03, sexy: 0.01999 }, 'allow'],
    [{ porn: 0.1, hentai: 0, sexy: 0 }, 'review'],
    [{ porn: 0.5, hentai: 0.2, sexy: 0.1 }, 'review'],
    [{ porn: 0.9, hentai: 0, sexy: 0 }, 'block'],
    [{ porn: 0.6, hentai: 0.2, sexy: 0.2 }, 'block'],
  ])('sums porn+hentai+sexy into nsfw and decides %o → %s', async (nsfwParts, decision) => {
    const classifier = new FakeClassifier();
    const nsfw = nsfwParts.porn + nsfwParts.hentai + nsfwParts.sexy;
    classifier.scores = { ...nsfwParts, drawing: 0.25 * (1 - nsfw), neutral: 0.75 * (1 - nsfw) };
    const { app } = await start({}, classifier);
    const data = (await raw(app, JPEG, 'image/jpeg')).json().data;
    expect(data.decision).toBe(decision);
    expect(data.scores.nsfw).toBeCloseTo(nsfw, 12);
    expect(data.scores.sfw).toBeCloseTo(1 - nsfw, 12);
  });

  it('reports the configured thresholds and decides with them', async () => {
    const classifier = new FakeClassifier();
    classifier.scores = { drawing: 0, hentai: 0, neutral: 0.7, porn: 0.3, sexy: 0 };
    const { app } = await start({ THRESHOLD_ALLOW: '0.2', THRESHOLD_BLOCK: '0.3' }, classifier);
    const data = (await raw(app, JPEG, 'image/jpeg')).json().data;
    expect(data.thresholds).toEqual({ allow: 0.2, block: 0.3 });
    expect(data.decision).toBe('block');
  });
});

describe('4001 bad request', () => {
  it.each([
    ['no Content-Type', undefined],
    ['text/plain', 'text/plain'],
    ['application/octet-stream', 'application/octet-stream'],
    ['application/json', 'application/json'],
  ])('refuses %s', async (_label, type) => {
    const { app } = await start();
    const headers: Record<string, string> = type ? { 'content-type': type } : {};
    const res = await app.inject({ method: 'POST', url: DETECT, payload: JPEG, headers });
    expectError(res, 400, 4001);
  });

  it('refuses a request with no body at all', async () => {
    const { app } = await start();
    expectError(await app.inject({ method: 'POST', url: DETECT }), 400, 4001);
    expectError(await raw(app, Buffer.alloc(0), 'image/png'), 400, 4001);
  });

  it('refuses a multipart body without a file part', async () => {
    const { app } = await start();
    expectError(await form(app, [{ name: 'note', data: 'x' }]), 400, 4001);
    expectError(await form(app, []), 400, 4001);
  });

  it('refuses an empty file part', async () => {
    const { app } = await start();
    expectError(await form(app, [{ name: 'file', filename: 'a.jpg', data: Buffer.alloc(0) }]), 400, 4001);
  });

  it('refuses two files, and a file part named otherwise', async () => {
    const { app } = await start();
    const two = await form(app, [
      { name: 'file', filename: 'a.jpg', data: JPEG },
      { name: 'file', filename: 'b.jpg', data: JPEG },
    ]);
    expectError(two, 400, 4001);
    const named = await form(app, [{ name: 'image', filename: 'a.jpg', data: JPEG }]);
    expectError(named, 400, 4001);
    expect(named.json().message).toMatch(/named "file"/);
  });

  it('refuses malformed multipart', async () => {
    const { app } = await start();
    const noBoundary = await raw(app, JPEG, 'multipart/form-data');
    expectError(noBoundary, 400, 4001);
    const { body, contentType } = multipart([{ name: 'file', filename: 'a.jpg', data: JPEG }]);
    const cut = await raw(app, body.subarray(0, body.length - 200), contentType);
    expectError(cut, 400, 4001);
    const garbage = await raw(app, Buffer.from('this is not multipart at all'), contentType);
    expectError(garbage, 400, 4001);
  });

  it('refuses an upload that stalls, raw or multipart, instead of holding its slot', async () => {
    const { app, gate } = await start({ UPLOAD_IDLE_TIMEOUT_MS: '200' });
    const { body, contentType } = multipart([{ name: 'file', filename: 'a.jpg', data: JPEG }]);
    for (const [type, bytes] of [
      ['image/jpeg', JPEG],
      [contentType, body],
    ] as const) {
      const stream = new PassThrough();
      stream.write(bytes.subarray(0, 1000)); // then nothing, and never the end
      const res = await app.inject({
        method: 'POST',
        url: DETECT,
        payload: stream,
        headers: { 'content-type': type },
      });
      expectError(res, 400, 4001);
      expect(res.json().message).toMatch(/stalled/);
    }
    expect(gate.admitted).toBe(0);
  });

  it('refuses a raw type naming another format than the bytes', async () => {
    const { app } = await start();
    const res = await raw(app, JPEG, 'image/png');
    expectError(res, 400, 4001);
    expect(res.json().message).toMatch(/image\/png.*jpeg/);
    expectError(await raw(app, JPEG, 'image/avif'), 400, 4001);
  });
});

describe('format, size and dimension refusals', () => {
  it('4002 for SVG and other content outside the whitelist, whatever it is called', async () => {
    const { app, classifier } = await start();
    expectError(await raw(app, SVG, 'image/svg+xml'), 400, 4002);
    expectError(await raw(app, SVG, 'image/png'), 400, 4002);
    expectError(
      await form(app, [{ name: 'file', filename: 'a.png', data: 'plain text, not an image' }]),
      400,
      4002,
    );
    expect(classifier.calls).toBe(0);
  });

  it('4003 for a body over the limit, from Content-Length or while streaming', async () => {
    const { app } = await start({ MAX_FILE_BYTES: '1000' });
    expectError(await raw(app, JPEG, 'image/jpeg'), 400, 4003);
    expectError(await form(app, [{ name: 'file', filename: 'a.jpg', data: JPEG }]), 400, 4003);
  });

  it('4003 at the real 50 MiB limit: one byte over is refused', async () => {
    const { app } = await start();
    const over = Buffer.alloc(52_428_801);
    JPEG.copy(over);
    const res = await raw(app, over, 'image/jpeg');
    expectError(res, 400, 4003);
    expect(res.headers.connection).toBe('close');
  });

  it('4004 from the header alone', async () => {
    const { app, classifier } = await start();
    expectError(await raw(app, readFileSync(fixture('65536-uint32-limit.png')), 'image/png'), 400, 4004);
    const small = await start({ OTHER_MAX_EDGE: '10' });
    expectError(await raw(small.app, PNG, 'image/png'), 400, 4004);
    expect(classifier.calls).toBe(0);
  });

  it('frees a refused body at once, not at the next collection', async () => {
    const { app } = await start();
    const header = readFileSync(fixture('65536-uint32-limit.png'));
    // One allocation, no garbage beside it: what a collection may free meanwhile is the server's alone.
    const body = Buffer.alloc(header.length + 30 * 1024 * 1024);
    header.copy(body);
    const before = process.memoryUsage().arrayBuffers;
    expectError(await raw(app, body, 'image/png'), 400, 4004);
    // The server's copy of the 30 MiB body is gone already (the test's own was counted before).
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(8 * 1024 * 1024);
  });

  it('4005 for truncated and corrupt images', async () => {
    const { app } = await start();
    expectError(await raw(app, readFileSync(fixture('truncated.png')), 'image/png'), 400, 4005);
    expectError(await raw(app, JPEG.subarray(0, 20), 'image/jpeg'), 400, 4005);
  });

  it.each(['raw', 'chunked', 'multipart'] as const)(
    '4005 for the 4.3 M-chunk PNG %s while it streams in, charged; the rest dropped and the connection kept',
    async (framing) => {
      const { app, classifier } = await start();
      const chunky = await hostileImage('png-4m-empty-chunks');
      const formed = multipart([{ name: 'file', filename: 'chunky.png', data: chunky }]);
      const wholeRes =
        framing === 'multipart'
          ? await form(app, [{ name: 'file', filename: 'chunky.png', data: chunky }])
          : await raw(app, chunky, 'image/png');
      const whole = wholeRes.json() as { code: number; message: string };
      expect(whole.code).toBe(4005);
      await app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = app.server.address() as AddressInfo;
      // One connection, written by hand (Node's client gives up a connection whose answer came before
      // its body was sent): the upload in 64 KiB pieces, then a second request on the same connection.
      const socket = connect(port, '127.0.0.1');
      await once(socket, 'connect');
      let received = '';
      let sentAtAnswer = -1;
      let sent = 0;
      socket.setEncoding('latin1');
      socket.on('data', (text: string) => {
        if (sentAtAnswer < 0) sentAtAnswer = sent;
        received += text;
      });
      const head = (type: string, length: number | 'chunked') =>
        `POST ${DETECT} HTTP/1.1\r\nHost: localhost\r\nContent-Type: ${type}\r\n${
          length === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${length}`
        }\r\n\r\n`;
      const body = framing === 'multipart' ? formed.body : chunky;
      try {
        if (framing === 'multipart') socket.write(head(formed.contentType, body.length));
        else socket.write(head('image/png', framing === 'chunked' ? 'chunked' : body.length));
        for (let at = 0; at < body.length; at += 65_536) {
          sent = at;
          const piece = body.subarray(at, at + 65_536);
          const framed =
            framing === 'chunked'
              ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')])
              : piece;
          if (!socket.write(framed)) await once(socket, 'drain');
        }
        if (framing === 'chunked') socket.write('0\r\n\r\n');
        await until(() => received.includes('\r\n\r\n') && received.endsWith('}'));
        const [status, ...lines] = received.split('\r\n\r\n')[0]?.split('\r\n') ?? [];
        expect(status).toBe('HTTP/1.1 400 Bad Request');
        expect(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4))).toEqual(whole);
        // Answered while most of the body was still to be sent (what was sent then was still in flight).
        expect(sentAtAnswer).toBeGreaterThanOrEqual(0);
        expect(sentAtAnswer).toBeLessThan(body.length / 2);
        const headers = Object.fromEntries(lines.map((line) => line.toLowerCase().split(': ')));
        // Charged like the whole body's 4005: one more request counted.
        expect(Number(headers['x-ratelimit-remaining'])).toBe(
          Number(wholeRes.headers['x-ratelimit-remaining']) - 1,
        );
        expect(headers.connection).toBe('keep-alive');
        // The rest of the body was read and dropped: the same connection serves the next request.
        received = '';
        socket.write(head('image/jpeg', JPEG.length));
        socket.write(JPEG);
        await until(() => received.includes('"decision"') || socket.destroyed);
        expect(received.startsWith('HTTP/1.1 200 OK')).toBe(true);
        expect(classifier.calls).toBe(1);
      } finally {
        socket.destroy();
      }
    },
  );
});

describe('anonymous limits', () => {
  it('refuses the 11th request of a minute with 4290 and whole-second Retry-After', async () => {
    const { app } = await start({ ANON_PER_MINUTE: '10', ANON_PER_DAY: '30' });
    for (let i = 0; i < 10; i++) {
      const res = await raw(app, JPEG, 'image/jpeg');
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-remaining']).toBe(String(30 - i - 1));
      expect(res.headers['x-quota-tier']).toBe('anonymous');
    }
    const refused = await raw(app, JPEG, 'image/jpeg');
    expectError(refused, 429, 4290);
    expect(refused.headers['retry-after']).toBe('30');
    expect(refused.headers['x-ratelimit-limit']).toBe('30');
    // When the minute resets, and that an API key has its own, higher limit.
    expect(refused.json().message).toBe(
      'Rate limited: 10 requests per minute; the minute resets at 2031-03-14T10:01:00Z. Anonymous calls are limited per IP address: an API key (a free account, from the console) on /api/open/detect has its own, higher limit',
    );
  });

  it('refuses past the daily quota with 4291, and counts failed requests too', async () => {
    const { app } = await start({ ANON_PER_MINUTE: '3', ANON_PER_DAY: '3' });
    expect((await raw(app, JPEG, 'image/jpeg')).statusCode).toBe(200);
    expect((await raw(app, SVG, 'image/svg+xml')).statusCode).toBe(400);
    expect((await raw(app, JPEG, 'image/jpeg')).statusCode).toBe(200);
    const refused = await raw(app, JPEG, 'image/jpeg');
    expectError(refused, 429, 4291);
    expect(refused.headers['retry-after']).toBe('50370');
    expect(refused.headers['x-ratelimit-reset']).toBe('1931299200'); // 2031-03-15T00:00:00Z
    expect(refused.json().message).toBe(
      'Daily quota of 3 requests used; it resets at UTC midnight (2031-03-15T00:00:00Z). Anonymous calls are limited per IP address: an API key (a free account, from the console) on /api/open/detect has its own, higher limit',
    );
  });

  it('counts per client IP', async () => {
    const { app } = await start({ ANON_PER_MINUTE: '1' });
    const from = (ip: string) =>
      app.inject({
        method: 'POST',
        url: DETECT,
        payload: JPEG,
        headers: { 'content-type': 'image/jpeg' },
        remoteAddress: ip,
      });
    expect((await from('10.0.0.1')).statusCode).toBe(200);
    expect((await from('10.0.0.2')).statusCode).toBe(200);
    expect((await from('10.0.0.1')).statusCode).toBe(429);
  });

  it('takes the client IP from X-Forwarded-For only through the configured trusted hops', async () => {
    const from = (app: App['app'], forwardedFor: string) =>
      app.inject({
        method: 'POST',
        url: DETECT,
        payload: JPEG,
        headers: { 'content-type': 'image/jpeg', 'x-forwarded-for': forwardedFor },
        remoteAddress: '10.9.9.9',
      });
    // Behind one trusted edge: each forwarded client has its own quota.
    const edge = await start({ ANON_PER_MINUTE: '1', TRUSTED_PROXY_HOPS: '1' });
    expect((await from(edge.app, '203.0.113.1')).statusCode).toBe(200);
    expect((await from(edge.app, '203.0.113.2')).statusCode).toBe(200);
    expect((await from(edge.app, '203.0.113.1')).statusCode).toBe(429);
    // A spoofed extra entry in front of the edge's own is not believed.
    expect((await from(edge.app, '198.51.100.7, 203.0.113.2')).statusCode).toBe(429);
    await edge.app.close();
    // No trusted hop: the header is ignored, the socket address counts.
    const direct = await start({ ANON_PER_MINUTE: '1' });
    expect((await from(direct.app, '203.0.113.1')).statusCode).toBe(200);
    expect((await from(direct.app, '203.0.113.2')).statusCode).toBe(429);
  });

  it('tracks a valid X-Device-Id per day and ignores an invalid one', async () => {
    const { app, quotaStore } = await start();
    const id = '3f1c2a4e-9b7d-4c1e-8a2b-5d6e7f8a9b0c';
    expect((await raw(app, JPEG, 'image/jpeg', { 'x-device-id': id })).statusCode).toBe(200);
    expect((await raw(app, JPEG, 'image/jpeg', { 'x-device-id': 'not-a-uuid' })).statusCode).toBe(200);
    expect((await raw(app, JPEG, 'image/jpeg', { 'x-device-id': id.toUpperCase() })).statusCode).toBe(200);
    expect(quotaStore.deviceCount(id)).toBe(2);
    expect(quotaStore.deviceCount('not-a-uuid')).toBe(0);
  });
});

describe('decode memory budget', () => {
  const MiB = 1024 * 1024;

  it('refuses with 4004, before decoding it, an image whose decoding could never fit the budget', async () => {
    const classifier = new FakeClassifier();
    const { app } = await start({ DECODE_MEMORY_BUDGET_BYTES: String(64 * MiB) }, classifier);
    // 9 MP progressive 4:4:4: ~54 MB of coefficients and ~27 MB of pixels.
    const bytes = await sharp({ create: { width: 3000, height: 3000, channels: 3, background: '#777' } })
      .jpeg({ progressive: true, chromaSubsampling: '4:4:4' })
      .toBuffer();
    const res = await raw(app, bytes, 'image/jpeg');
    expectError(res, 400, 4004);
    expect(res.json().message).toMatch(/decode memory budget of 64 MiB/);
    expect(classifier.calls).toBe(0);
  });

  it('decodes at once only as many images as the budget holds, and serves them all', async () => {
    const classifier = new FakeClassifier();
    classifier.delayMs = 50;
    const { app, gate } = await start(
      { DECODE_MEMORY_BUDGET_BYTES: String(140 * MiB), MAX_ACTIVE_IMAGES: '12' },
      classifier,
    );
    // 1400 x 1400 RGBA: estimated at ~31 MiB each (decode-memory.ts): the budget would hold four, but
    // one client (this address) holds at most half of it, 70 MiB, so two at a time.
    const png = await sharp({ create: { width: 1400, height: 1400, channels: 4, background: '#777' } })
      .png()
      .toBuffer();
    let most = 0;
    const sampler = setInterval(() => {
      most = Math.max(most, gate.decodingBytes);
    }, 1);
    const answers = await Promise.all(Array.from({ length: 12 }, () => raw(app, png, 'image/png')));
    clearInterval(sampler);
    expect(answers.map((a) => a.statusCode)).toEqual(Array(12).fill(200));
    expect(most).toBeGreaterThan(60 * MiB);
    expect(most).toBeLessThanOrEqual(70 * MiB);
    expect(gate.decodingBytes).toBe(0);
  });
});

describe('predicted cost', () => {
  it('refuses before any work, charged (4005), an image predicted over the deadline on one core', async () => {
    const { app, classifier } = await start({ SCORING_DEADLINE_MS: '200', ANON_PER_MINUTE: '2' });
    // 4000 × 4000 PNG: ~0.4 s of CPU predicted (image-cost.ts), over a 0.2 s deadline.
    const png = await sharp({ create: { width: 4000, height: 4000, channels: 3, background: '#777' } })
      .png()
      .toBuffer();
    const res = await raw(app, png, 'image/png');
    expectError(res, 400, 4005);
    expect(res.json().message).toMatch(
      /would take about 0\.\d s of CPU, over the 0\.2 s one image may take here/,
    );
    expect(classifier.calls).toBe(0);
    // The work a photo costs fits: scored, and the refusal above was counted (two a minute).
    const ok = await raw(app, JPEG, 'image/jpeg');
    expect(ok.statusCode).toBe(200);
    expect(ok.headers['x-image-cost']).toMatch(/^cpu-ms=\d+; tiles=1; frames=1; models=1$/);
    expectError(await raw(app, JPEG, 'image/jpeg'), 429, 4290);
  });

  it('states the tiles of a long frame in X-Image-Cost', async () => {
    const { app } = await start();
    const strip = await sharp({ create: { width: 8192, height: 100, channels: 3, background: '#777' } })
      .png()
      .toBuffer();
    const res = await raw(app, strip, 'image/png');
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-image-cost']).toMatch(/tiles=8;/);
  });
});

describe('charging a killed decode', () => {
  it('charges an image killed at its CPU limit or at the wall deadline (400/4005), refunds one whose decoder died (503)', {
    timeout: 60_000,
  }, async () => {
    // On a fixed clock: the three-a-minute window cannot roll over half-way.
    current = await embeddedApp({ env: { ANON_PER_MINUTE: '3', ANON_PER_DAY: '100' }, now: () => T0 });
    // Stand-ins (no model): a decoder that spins on a 21 px wide image, idles on a 22 px one, and dies
    // on a 13 px one.
    const scorer = new RoutedScorer(
      await DecoderPool.create({
        processes: 3,
        inputSize: 224,
        limits: DEFAULT_DIMENSION_LIMITS,
        jpegDecoder: 'sharp',
        // The spinning decoder needs 100 ms of CPU within 4 s: 2.5 % of a core, even on a busy machine.
        deadlineMs: 4_000,
        cpuLimitMs: 100,
        entry: new URL('../../test/support/stand-in-decoder-process.mjs', import.meta.url),
      }),
      await WorkerPoolScorer.create({
        model: 'mobilenet_v2',
        workers: 1,
        intraOpThreads: 1,
        limits: DEFAULT_DIMENSION_LIMITS,
        deadlineMs: 60_000,
        entry: new URL('../../test/support/recording-scorer-worker.mjs', import.meta.url),
      }),
      // Every image to the decoder processes (these are small).
      { maxPixels: 0 },
    );
    current.model.fill(scorer);
    const png = (width: number) =>
      sharp({ create: { width, height: 10, channels: 3, background: '#777' } })
        .png()
        .toBuffer();
    try {
      // The service's own failure (its decoder died): three at once, each counted then refunded, so
      // the three-a-minute allowance is whole again.
      const dies = await png(13);
      const app = current.app;
      for (const lost of await Promise.all([1, 2, 3].map(() => raw(app, dies, 'image/png')))) {
        expectError(lost, 503, 5001);
        expect(lost.headers['retry-after']).toBe('1');
      }
      // Their own cost, cut at the CPU limit (two) or at the wall deadline (one): charged, all three.
      for (let i = 0; i < 2; i++) {
        const costly = await raw(current.app, await png(21), 'image/png');
        expectError(costly, 400, 4005);
        expect(costly.json().message).toMatch(/CPU time/);
      }
      const cut = await raw(current.app, await png(22), 'image/png');
      expectError(cut, 400, 4005);
      expect(cut.json().message).toMatch(/did not finish within 4 s/);
      expectError(await raw(current.app, await png(10), 'image/png'), 429, 4290);
    } finally {
      await scorer.close();
    }
  });
});

describe('availability', () => {
  it('answers 5001 with Retry-After while the model is not loaded, without counting quota', async () => {
    current = await embeddedApp({ env: { ANON_PER_MINUTE: '1', ANON_PER_DAY: '1' } });
    const res = await raw(current.app, JPEG, 'image/jpeg');
    expectError(res, 503, 5001);
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect((await current.app.inject({ url: '/internal/ready' })).statusCode).toBe(503);
    current.model.fill(new InProcessScorer(new FakeClassifier()));
    expect((await current.app.inject({ url: '/internal/ready' })).statusCode).toBe(200);
    expect((await raw(current.app, JPEG, 'image/jpeg')).statusCode).toBe(200);
  });

  it('is not ready while no scoring worker can take an image, and not live once its threads are stuck', async () => {
    current = await embeddedApp();
    const scorer = new InProcessScorer(new FakeClassifier());
    let state: ScorerState = 'recovering';
    Object.defineProperty(scorer, 'state', { get: () => state });
    current.model.fill(scorer);
    const probe = async (url: string) => (await current?.app.inject({ url }))?.statusCode;
    expect([await probe('/internal/ready'), await probe('/internal/live')]).toEqual([503, 200]);
    state = 'ready';
    expect([await probe('/internal/ready'), await probe('/internal/live')]).toEqual([200, 200]);
    state = 'wedged';
    expect([await probe('/internal/ready'), await probe('/internal/live')]).toEqual([503, 503]);
  });

  it('answers 5001 past MAX_UPLOADS instead of queueing more, and charges no refusal', async () => {
    const classifier = new FakeClassifier();
    classifier.delayMs = 300;
    const { app, quotaStore, config } = await start(
      { MAX_ACTIVE_IMAGES: '1', MAX_UPLOADS: '2', OVERLOAD_RETRY_AFTER_SECONDS: '2' },
      classifier,
    );
    const results = await Promise.all([0, 1, 2, 3].map(() => raw(app, JPEG, 'image/jpeg')));
    const codes = results.map((r) => r.statusCode).sort();
    expect(codes).toEqual([200, 200, 503, 503]);
    const refused = results.find((r) => r.statusCode === 503);
    expect(refused?.headers['retry-after']).toBe('2');
    expect(refused?.json().code).toBe(5001);
    expect((await quotaStore.peek('anon:ip:127.0.0.1', config.anonymous)).day.used).toBe(2);
    // The slots come back: the next request is served.
    expect((await raw(app, JPEG, 'image/jpeg')).statusCode).toBe(200);
  });

  it('lets read images wait in order for a scoring slot instead of refusing them', async () => {
    const classifier = new FakeClassifier();
    classifier.delayMs = 100;
    const { app, gate } = await start({ MAX_ACTIVE_IMAGES: '1', MAX_UPLOADS: '6' }, classifier);
    const results = await Promise.all([0, 1, 2, 3, 4, 5].map(() => raw(app, JPEG, 'image/jpeg')));
    expect(results.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(gate.admitted).toBe(0);
    expect(gate.running).toBe(0);
  });

  it('holds no scoring slot while an upload is in progress', async () => {
    const { app, gate } = await start({ MAX_ACTIVE_IMAGES: '1', MAX_UPLOADS: '4' });
    const stalled = new PassThrough();
    stalled.write(JPEG.subarray(0, 100));
    const slow = app.inject({
      method: 'POST',
      url: DETECT,
      payload: stalled,
      headers: { 'content-type': 'image/jpeg' },
    });
    await until(() => gate.admitted === 1);
    expect(gate.running).toBe(0);
    // The one scoring slot is free for others while the first upload waits for its bytes.
    expect((await raw(app, JPEG, 'image/jpeg')).statusCode).toBe(200);
    stalled.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
  });

  it('bounds uploads per client (IP here): others still get in, and the refused are not charged', async () => {
    const { app, gate, quotaStore, config } = await start({ MAX_UPLOADS_PER_CLIENT: '1' });
    const stalled = new PassThrough();
    stalled.write(JPEG.subarray(0, 100));
    const from = (ip: string, payload: Buffer | PassThrough) =>
      app.inject({
        method: 'POST',
        url: DETECT,
        payload,
        headers: { 'content-type': 'image/jpeg' },
        remoteAddress: ip,
      });
    const slow = from('10.0.0.1', stalled);
    await until(() => gate.admitted === 1);
    expectError(await from('10.0.0.1', JPEG), 503, 5001);
    expect((await from('10.0.0.2', JPEG)).statusCode).toBe(200);
    expect((await quotaStore.peek('anon:ip:10.0.0.1', config.anonymous)).day.used).toBe(1);
    stalled.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
  });

  it('bounds uploads per account on the key endpoint, refunding the 503 it answers past the bound', async () => {
    const { app, gate, quotaStore, accountStore, config } = await start({ MAX_UPLOADS_PER_CLIENT: '1' });
    const account = await accountStore.createAccount({ email: 'bound@example.com', tier: 'free' });
    const secret = (await accountStore.createKey(account.id))?.secret as string;
    const call = (payload: Buffer | PassThrough, ip: string) =>
      app.inject({
        method: 'POST',
        url: '/api/open/detect',
        payload,
        headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${secret}` },
        remoteAddress: ip,
      });
    const stalled = new PassThrough();
    stalled.write(JPEG.subarray(0, 100));
    const slow = call(stalled, '10.0.0.1');
    await until(() => gate.admitted === 1);
    // Another IP, same account: the account is the client here.
    const refused = await call(JPEG, '10.0.0.2');
    expectError(refused, 503, 5001);
    expect(refused.json().message).toMatch(/account/);
    expect((await quotaStore.peek(`acct:${account.id}`, config.tiers.free)).day.used).toBe(1);
    stalled.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
    expect((await call(JPEG, '10.0.0.2')).statusCode).toBe(200);
    expect((await quotaStore.peek(`acct:${account.id}`, config.tiers.free)).day.used).toBe(2);
  });

  it('answers 401 and 429 as usual when there is no room, and an uncharged 503 otherwise', async () => {
    const { app, gate, quotaStore, config } = await start({ MAX_UPLOADS: '1', ANON_PER_MINUTE: '2' });
    const send = (payload: Buffer | PassThrough, ip: string, headers: Record<string, string> = {}) =>
      app.inject({
        method: 'POST',
        url: headers.authorization ? '/api/open/detect' : DETECT,
        payload,
        headers: { 'content-type': 'image/jpeg', ...headers },
        remoteAddress: ip,
      });
    expect((await send(JPEG, '10.0.0.9')).statusCode).toBe(200);
    expect((await send(JPEG, '10.0.0.9')).statusCode).toBe(200);
    const stalled = new PassThrough();
    stalled.write(JPEG.subarray(0, 100));
    const slow = send(stalled, '10.0.0.1');
    await until(() => gate.admitted === 1);
    expectError(await send(JPEG, '10.0.0.9'), 429, 4290);
    expectError(
      await send(JPEG, '10.0.0.2', { authorization: `Bearer nsk_live_${'b'.repeat(32)}` }),
      401,
      4011,
    );
    expectError(await send(JPEG, '10.0.0.2', { authorization: 'Bearer nope' }), 401, 4011);
    expectError(await send(JPEG, '10.0.0.2'), 503, 5001);
    expect((await quotaStore.peek('anon:ip:10.0.0.2', config.anonymous)).day.used).toBe(0);
    stalled.end(JPEG.subarray(100));
    expect((await slow).statusCode).toBe(200);
  });

  it('cuts an upload slower than the minimum rate with 4001, once the grace period is over', async () => {
    const { app, gate } = await start({
      UPLOAD_MIN_BYTES_PER_SECOND: '100000',
      UPLOAD_MIN_RATE_GRACE_MS: '300',
    });
    const trickle = new PassThrough();
    let sent = 0;
    const timer = setInterval(() => {
      trickle.write(JPEG.subarray(sent, sent + 10));
      sent += 10;
    }, 20);
    try {
      const res = await app.inject({
        method: 'POST',
        url: DETECT,
        payload: trickle,
        headers: { 'content-type': 'image/jpeg', 'content-length': String(JPEG.length) },
      });
      expectError(res, 400, 4001);
      expect(res.json().message).toMatch(
        /Upload too slow: \d+ bytes in [\d.]+ s, below the minimum of 100000 bytes\/s/,
      );
    } finally {
      clearInterval(timer);
    }
    await until(() => gate.admitted === 0);
  });

  it('cuts an upload that would pass the bytes in progress with an uncharged 5001', async () => {
    const { app, quotaStore, config, gate } = await start({ MAX_UPLOAD_BYTES_IN_PROGRESS: '1000' });
    const res = await raw(app, JPEG, 'image/jpeg');
    expectError(res, 503, 5001);
    expect(res.json().message).toMatch(/upload bytes/);
    expect((await quotaStore.peek('anon:ip:127.0.0.1', config.anonymous)).day.used).toBe(0);
    expect(gate.bytes).toBe(0);
    expect((await raw(app, JPEG.subarray(0, 900), 'image/jpeg')).statusCode).toBe(400);
  });

  it('turns a classifier failure into 5001, never a 500, and does not charge it', async () => {
    const classifier = new FakeClassifier();
    classifier.classify = async () => {
      throw new Error('onnx exploded');
    };
    const { app, quotaStore, config } = await start({}, classifier);
    expectError(await raw(app, JPEG, 'image/jpeg'), 503, 5001);
    expect((await quotaStore.peek('anon:ip:127.0.0.1', config.anonymous)).day.used).toBe(0);
  });
});

describe('routing', () => {
  it('answers unknown routes with 404 and wrong methods with 405, in the envelope', async () => {
    const { app } = await start();
    const missing = await app.inject({ method: 'GET', url: '/nope' });
    expect(missing.statusCode).toBe(404);
    expect(Object.keys(missing.json()).sort()).toEqual(['code', 'message']);
    const wrong = await app.inject({ method: 'GET', url: DETECT });
    expect(wrong.statusCode).toBe(405);
    expect(wrong.headers.allow).toContain('POST');
    expect(Object.keys(wrong.json()).sort()).toEqual(['code', 'message']);
    expect((await app.inject({ method: 'DELETE', url: '/api/public/health' })).statusCode).toBe(405);
    // A method Fastify reads bodies for, with no body and no Content-Type: still 405, not a 400.
    for (const body of [undefined, 'x']) {
      const query = await app.inject({ method: 'QUERY' as 'GET', url: '/api/public/health', payload: body });
      expect({ status: query.statusCode, allow: query.headers.allow, code: query.json().code }).toEqual({
        status: 405,
        allow: 'GET, HEAD',
        code: 4050,
      });
    }
    expect((await app.inject({ method: 'QUERY' as 'GET', url: '/nope' })).statusCode).toBe(404);
  });

  it('serves the key endpoint to a valid key and refuses others with 4011 (full suite: services/quota)', async () => {
    const { app, accountStore } = await start();
    const account = await accountStore.createAccount({ email: 'detect@example.com', tier: 'free' });
    const key = await accountStore.createKey(account.id);
    const call = (authorization: string) =>
      app.inject({
        method: 'POST',
        url: '/api/open/detect',
        payload: JPEG,
        headers: { 'content-type': 'image/jpeg', authorization },
      });
    const res = await call(`Bearer ${key?.secret}`);
    expect(res.statusCode).toBe(200);
    expect(res.json().data.image.format).toBe('jpeg');
    expect(res.headers['x-quota-tier']).toBe('free');
    expectError(await call(`Bearer nsk_live_${'a'.repeat(32)}`), 401, 4011);
  });
});
