// Refusals raised by the HTTP layer itself, and how refused uploads are closed: raw sockets against a
// real listening server (the embedded app, fake model).

import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import net from 'node:net';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { fixture } from '../../test/fixtures/corpus.ts';
import { embeddedApp } from '../../test/support/embedded-app.ts';
import { FakeClassifier } from '../../test/support/fake-classifier.ts';
import { handleClientError, readToEnd } from './connection-guards.ts';

let app: Awaited<ReturnType<typeof embeddedApp>>['app'];
let port: number;

beforeAll(async () => {
  ({ app } = await embeddedApp({ classifier: new FakeClassifier() }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as net.AddressInfo).port;
});

afterAll(async () => {
  await app?.close();
});

interface RawResponse {
  raw: string;
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

function parse(raw: string): RawResponse {
  const end = raw.indexOf('\r\n\r\n');
  const [statusLine = '', ...lines] = raw.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  const text = raw.slice(end + 4);
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { raw, status: Number(statusLine.split(' ')[1]), headers, body };
}

/** Sends `data` and collects everything the server writes until it closes (or `waitMs` passes). */
function exchange(data: string | Buffer, waitMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), waitMs);
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    });
    socket.write(data);
  });
}

function expectEnvelope(res: RawResponse, status: number, code: number): void {
  expect(res.status, res.raw.slice(0, 300)).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(Object.keys(res.body as object).sort()).toEqual(['code', 'message']);
  expect((res.body as { code: number }).code).toBe(code);
}

describe('refusals of the HTTP layer are in the envelope', () => {
  it('malformed framing → 400 / 4001', async () => {
    const res = parse(await exchange('GET /health HTTP/1.1\r\nHost: x\r\nNot a header line\r\n\r\n'));
    expectEnvelope(res, 400, 4001);
    expect(res.headers.connection).toBe('close');
  });

  it('Content-Length and chunked together → 400 / 4001', async () => {
    const res = parse(
      await exchange(
        'POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n' +
          'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      ),
    );
    expectEnvelope(res, 400, 4001);
  });

  it('headers over the limit → 431 / 4310', async () => {
    const res = parse(
      await exchange(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`),
    );
    expectEnvelope(res, 431, 4310);
  });

  it('no Host on HTTP/1.1 → 400 / 4001', async () => {
    const res = parse(await exchange('GET /health HTTP/1.1\r\n\r\n'));
    expectEnvelope(res, 400, 4001);
    expect((res.body as { message: string }).message).toMatch(/Host/);
  });

  it('an unknown method on a known route → 405 / 4050 with Allow', async () => {
    for (const method of ['FOO', 'PROPFIND', 'PUT']) {
      const res = parse(
        await exchange(`${method} /api/public/detect HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
      );
      expectEnvelope(res, 405, 4050);
      expect(res.headers.allow, method).toBe('POST');
    }
  });

  it('an unknown method on an unknown path → 400 / 4001', async () => {
    const res = parse(await exchange('FOO /nowhere HTTP/1.1\r\nHost: x\r\n\r\n'));
    expectEnvelope(res, 400, 4001);
  });

  it("Node's request time-out → 408 / 4080 (the handler on a real socket)", async () => {
    // The server's own timer is 120 s; the handler it calls is exercised directly on a live socket.
    const server = net.createServer((socket) =>
      handleClientError(Object.assign(new Error('timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket, {
        allowedMethods: () => [],
      }),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port: timerPort } = server.address() as net.AddressInfo;
    const raw = await new Promise<string>((resolve) => {
      const socket = net.connect(timerPort, '127.0.0.1');
      let out = '';
      socket.on('data', (d) => (out += d.toString('latin1')));
      socket.on('close', () => resolve(out));
      socket.write('POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc');
    });
    server.close();
    expectEnvelope(parse(raw), 408, 4080);
  });
});

describe('oversized uploads are answered where the client can read them', () => {
  it('Expect: 100-continue over the limit → 400 / 4003 at once, never 100 Continue', async () => {
    const raw = await exchange(
      'POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n' +
        `Content-Length: ${60 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`,
    );
    expect(raw.startsWith('HTTP/1.1 400 ')).toBe(true);
    expect(raw).not.toContain('100 Continue');
    expectEnvelope(parse(raw), 400, 4003);
  });

  it('Expect: 100-continue within the limit → 100 Continue, then the result', async () => {
    const image = readFileSync(fixture('320x240.jpg'));
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      let out = '';
      socket.on('error', reject);
      socket.on('data', (d) => {
        out += d.toString('latin1');
        if (out === 'HTTP/1.1 100 Continue\r\n\r\n') socket.write(image);
      });
      socket.on('close', () => resolve(out));
      socket.write(
        'POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nConnection: close\r\n' +
          `Content-Length: ${image.length}\r\nExpect: 100-continue\r\n\r\n`,
      );
    });
    expect(raw.startsWith('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ')).toBe(true);
    const res = parse(raw.slice('HTTP/1.1 100 Continue\r\n\r\n'.length));
    expect((res.body as { code: number }).code).toBe(0);
  });

  /** Writes the whole request before reading a byte of the answer (the socket stays paused). */
  function writeAllThenRead(head: string, bodyBytes: number, chunked: boolean): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.pause();
      const chunks: Buffer[] = [];
      const block = Buffer.alloc(1024 * 1024, 0xab);
      let sent = 0;
      let failed: Error | undefined;
      socket.on('error', (err) => {
        failed = err;
      });
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('latin1');
        if (text.length === 0 && failed) reject(failed);
        else resolve(text);
      });
      const writeMore = () => {
        while (sent < bodyBytes) {
          const n = Math.min(block.length, bodyBytes - sent);
          sent += n;
          const data = chunked
            ? Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`), block.subarray(0, n), Buffer.from('\r\n')])
            : block.subarray(0, n);
          if (!socket.write(data)) {
            socket.once('drain', writeMore);
            return;
          }
        }
        socket.write(chunked ? '0\r\n\r\n' : '', () => {
          // Everything is written: only now start reading.
          socket.on('data', (d) => chunks.push(d));
          socket.resume();
        });
      };
      socket.write(head);
      writeMore();
    });
  }

  it('a client that writes a 60 MiB body before reading still reads the 4003 envelope', async () => {
    const size = 60 * 1024 * 1024;
    const raw = await writeAllThenRead(
      `POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: ${size}\r\n\r\n`,
      size,
      false,
    );
    expectEnvelope(parse(raw), 400, 4003);
  });

  it('the same without Content-Length (chunked, refused at the limit) reads the 4003 envelope', async () => {
    const size = 60 * 1024 * 1024;
    const raw = await writeAllThenRead(
      'POST /api/public/detect HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nTransfer-Encoding: chunked\r\n\r\n',
      size,
      true,
    );
    expectEnvelope(parse(raw), 400, 4003);
  });
});

describe('readToEnd: the rest of a refused body, read and dropped before answering behind a proxy', () => {
  const BOUNDS = { maxBytes: 1000, maxMs: 10_000, idleMs: 2_000 };
  const body = () => new PassThrough() as PassThrough & IncomingMessage;

  it('is true once the body has ended, however it arrives', async () => {
    const req = body();
    const ended = readToEnd(req, BOUNDS);
    req.write(Buffer.alloc(600));
    req.end(Buffer.alloc(400));
    expect(await ended).toBe(true);
    expect(await readToEnd(req, BOUNDS)).toBe(true);
  });

  it('is false past maxBytes, and reading stops there', async () => {
    const req = body();
    const ended = readToEnd(req, BOUNDS);
    req.write(Buffer.alloc(1001));
    expect(await ended).toBe(false);
    expect(req.isPaused()).toBe(true);
  });

  it('is false when nothing arrives for idleMs, or past maxMs', async () => {
    vi.useFakeTimers();
    try {
      const idle = body();
      const idleEnded = readToEnd(idle, BOUNDS);
      vi.advanceTimersByTime(BOUNDS.idleMs);
      expect(await idleEnded).toBe(false);

      const trickle = body();
      const trickleEnded = readToEnd(trickle, BOUNDS);
      for (let ms = 0; ms < BOUNDS.maxMs; ms += 1000) {
        trickle.write(Buffer.alloc(1));
        await vi.advanceTimersByTimeAsync(1000);
      }
      expect(await trickleEnded).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});
