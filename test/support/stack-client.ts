// Requests to the stack's edge for the e2e suite: the answer's status, envelope code, headers, time.

import { readFileSync } from 'node:fs';
import { type IncomingHttpHeaders, request } from 'node:http';
import { connect } from 'node:net';
import { expect } from 'vitest';
import { fixture } from '../fixtures/corpus.ts';

export const JPEG = readFileSync(fixture('320x240.jpg'));

export interface EdgeAnswer {
  status: number;
  code: number | undefined;
  // biome-ignore lint/suspicious/noExplicitAny: the envelope's data, checked by each test
  body: any;
  headers: Headers;
  ms: number;
  contentType: string | null;
}

/** POSTs `body` (default: a 320×240 JPEG as raw bytes) to `path` on `baseUrl`. */
export async function post(
  baseUrl: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: Buffer | FormData; contentType?: string } = {},
): Promise<EdgeAnswer> {
  const started = performance.now();
  const headers: Record<string, string> = { ...opts.headers };
  if (!(opts.body instanceof FormData)) headers['content-type'] = opts.contentType ?? 'image/jpeg';
  const res = await fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers,
    body: (opts.body ?? JPEG) as BodyInit,
  });
  return answer(res, started);
}

export async function get(baseUrl: string, path: string): Promise<EdgeAnswer> {
  const started = performance.now();
  return answer(await fetch(`${baseUrl}${path}`), started);
}

async function answer(res: Response, started: number): Promise<EdgeAnswer> {
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return {
    status: res.status,
    code: (body as { code?: number })?.code,
    body,
    headers: res.headers,
    ms: performance.now() - started,
    contentType: res.headers.get('content-type'),
  };
}

/**
 * The spec's answer to an anonymous detect of JPEG through the gateway: 200, code 0, the image's facts, a
 * decision, the anonymous tier and exactly one set of X-RateLimit headers (the daily window's, from
 * ext_authz, not a second set from detect).
 */
export function expectAnonymousJpegScored(answer: EdgeAnswer, anonPerDay: string): void {
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  expect(answer.body.code).toBe(0);
  expect(answer.body.data.image).toMatchObject({
    format: 'jpeg',
    width: 320,
    height: 240,
    bytes: JPEG.length,
  });
  expect(['allow', 'review', 'block']).toContain(answer.body.data.decision);
  expect(answer.headers.get('x-quota-tier')).toBe('anonymous');
  expect(answer.headers.get('x-ratelimit-limit')).toBe(anonPerDay);
  expect(answer.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/);
}

export function multipartJpeg(): FormData {
  const form = new FormData();
  form.append('file', new Blob([JPEG], { type: 'image/jpeg' }), '320x240.jpg');
  return form;
}

/** Jaeger's view of one trace: every span with its service and tags. */
export interface TraceSpan {
  service: string;
  operation: string;
  spanId: string;
  parentSpanId: string | undefined;
  tags: Record<string, unknown>;
}

export async function jaegerTrace(jaegerUrl: string, traceId: string): Promise<TraceSpan[]> {
  const res = await fetch(`${jaegerUrl}/api/traces/${traceId}`);
  if (res.status === 404) return [];
  const body = (await res.json()) as {
    data?: Array<{
      processes: Record<string, { serviceName: string }>;
      spans: Array<{
        spanID: string;
        operationName: string;
        processID: string;
        references?: Array<{ refType: string; spanID: string }>;
        tags: Array<{ key: string; value: unknown }>;
      }>;
    }>;
  };
  const spans: TraceSpan[] = [];
  for (const trace of body.data ?? []) {
    for (const s of trace.spans) {
      spans.push({
        service: trace.processes[s.processID]?.serviceName ?? '?',
        operation: s.operationName,
        spanId: s.spanID,
        parentSpanId: s.references?.find((r) => r.refType === 'CHILD_OF')?.spanID,
        tags: Object.fromEntries(s.tags.map((t) => [t.key, t.value])),
      });
    }
  }
  return spans;
}

/**
 * Writes `head` and then all of `body` on a fresh connection before reading anything (as most clients
 * do), then returns everything read until the server closes the connection or, once a whole answer
 * with a Content-Length is in, at once. A reset before that rejects, with what was read.
 */
export function rawUpload(baseUrl: string, head: string, body: Buffer): Promise<string> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    socket.pause();
    let read = Buffer.alloc(0);
    const complete = () => {
      const text = read.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end))?.[1];
      return end >= 0 && length !== undefined && read.length >= end + 4 + Number(length);
    };
    const done = () => {
      socket.destroy();
      resolve(read.toString('latin1'));
    };
    socket.on('data', (chunk: Buffer) => {
      read = Buffer.concat([read, chunk]);
      if (complete()) done();
    });
    socket.on('end', done);
    socket.on('error', (err) =>
      reject(new Error(`${err.message} after reading: ${read.toString('latin1')}`)),
    );
    socket.setTimeout(60_000, () => socket.destroy(new Error('no answer to a raw upload')));
    socket.write(head);
    // Reading starts only once the whole body is handed to the kernel.
    socket.write(body, () => socket.resume());
  });
}

/**
 * Sends `text` as is on a fresh connection to `baseUrl` and returns everything read until the server
 * closes it. The client's side stays open meanwhile: Envoy takes a client's half-close as an abort.
 */
export function rawRequest(baseUrl: string, text: string): Promise<string> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let read = '';
    socket.on('data', (chunk) => {
      read += chunk.toString('latin1');
    });
    socket.on('end', () => {
      socket.destroy();
      resolve(read);
    });
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer to a raw request: ${read}`)));
    socket.write(text);
  });
}

export interface UploadAnswer {
  status: number;
  code: number | undefined;
  message: string | undefined;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface PartialUpload {
  /** Resolves once the first part is written. */
  started: Promise<void>;
  /** The answer; rejects if the connection is cut first. */
  done: Promise<UploadAnswer>;
  /** Whether the answer has arrived. */
  readonly answered: boolean;
  /** Sends the rest of the body. */
  finish(): void;
  /** Cuts the connection (the upload never completes). */
  abort(): void;
}

/**
 * A raw JPEG upload on a connection of its own (from `localAddress`, so loopback clients can be told
 * apart: 127.0.0.2, 127.0.0.3 …) whose first `sentBytes` (default: half) go now and the rest on
 * finish(); meanwhile the upload stalls, holding whatever the server gave it.
 */
export function partialUpload(
  baseUrl: string,
  opts: { path?: string; headers?: Record<string, string>; localAddress?: string; sentBytes?: number } = {},
): PartialUpload {
  const sent = opts.sentBytes ?? Math.floor(JPEG.length / 2);
  let answered = false;
  let started: () => void = () => {};
  const startedP = new Promise<void>((r) => (started = r));
  const req = request(`${baseUrl}${opts.path ?? '/api/public/detect'}`, {
    method: 'POST',
    agent: false,
    localAddress: opts.localAddress,
    headers: { ...opts.headers, 'content-type': 'image/jpeg', 'content-length': String(JPEG.length) },
  });
  const done = new Promise<UploadAnswer>((resolve, reject) => {
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        answered = true;
        let envelope: { code?: number; message?: string } = {};
        try {
          envelope = JSON.parse(body);
        } catch {}
        resolve({
          status: res.statusCode ?? 0,
          code: envelope.code,
          message: envelope.message,
          headers: res.headers,
          body,
        });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  // Cut uploads are expected: whoever awaits `done` still sees the rejection.
  done.catch(() => {});
  req.write(JPEG.subarray(0, sent), () => started());
  return {
    started: startedP,
    done,
    get answered() {
      return answered;
    },
    finish: () => req.end(JPEG.subarray(sent)),
    abort: () => req.destroy(),
  };
}

/** A whole raw JPEG upload from `localAddress`, answered. */
export function uploadFrom(
  baseUrl: string,
  localAddress: string,
  opts: { path?: string; headers?: Record<string, string> } = {},
): Promise<UploadAnswer> {
  const upload = partialUpload(baseUrl, { ...opts, localAddress, sentBytes: JPEG.length });
  upload.finish();
  return upload.done;
}
