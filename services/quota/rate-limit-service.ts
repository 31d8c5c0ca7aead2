// Envoy's rate limit service (gRPC `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), as
// much of it as the edge's network `ratelimit` filter needs: Envoy asks once per new client connection,
// with the descriptor `source` = the socket peer's address, and closes the connection when answered
// OVER_LIMIT (charts/nsfwdetector/files/envoy.yaml.tpl; docs/edge.md). The decision is the
// SourceConnectionLimiter's. Served over cleartext HTTP/2 on loopback (the sidecar's own port); the
// few protobuf fields involved are read and written here rather than through a gRPC library: the
// request's descriptors (field 2: entries, field 1: key 1 / value 2) and the answer's overall_code.

import { createServer, type Http2Server, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { SourceConnectionLimiter } from './source-limit.ts';

export const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
/** The descriptor key whose value is the client's address (the chart's filter sets it). */
export const SOURCE_DESCRIPTOR_KEY = 'source';
/** RateLimitResponse.Code. */
export const RATE_LIMIT_OK = 1;
export const RATE_LIMIT_OVER_LIMIT = 2;
/** A request larger than this is not Envoy's (one short descriptor). */
const MAX_REQUEST_BYTES = 4096;

export interface RateLimitService {
  /** The port it listens on. */
  port: number;
  /** Stops listening and closes Envoy's open connections. */
  close(): Promise<void>;
}

/** Starts the service on `host:port` (0: any free port); resolves once it listens. */
export async function startRateLimitService(
  limiter: SourceConnectionLimiter,
  port: number,
  host = '127.0.0.1',
): Promise<RateLimitService> {
  // Envoy resets each call it gave up on (its timeout): under a flood thousands a second, which
  // nghttp2's rapid-reset guard (1,000 at once, 33 a second) would answer by closing the connection,
  // failing every call in flight with it. The only peer is our own Envoy on loopback.
  const server: Http2Server = createServer({ streamResetBurst: 1_000_000, streamResetRate: 1_000_000 });
  const sessions = new Set<ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
  });
  server.on('stream', (stream, headers) => {
    if (headers[':path'] !== SHOULD_RATE_LIMIT) {
      answer(stream, undefined, 12, 'unimplemented');
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_REQUEST_BYTES) stream.close();
      else chunks.push(chunk);
    });
    stream.on('end', () => {
      let source: string | undefined;
      try {
        source = sourceOf(unframe(Buffer.concat(chunks)));
      } catch {
        source = undefined;
      }
      if (source === undefined) {
        answer(stream, undefined, 3, `no '${SOURCE_DESCRIPTOR_KEY}' descriptor`);
        return;
      }
      answer(stream, limiter.admit(source) ? RATE_LIMIT_OK : RATE_LIMIT_OVER_LIMIT, 0);
    });
    stream.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.destroy();
      await closed;
    },
  };
}

/** A gRPC answer: a RateLimitResponse with `code`, or none, and the status in the trailers. */
function answer(stream: ServerHttp2Stream, code: number | undefined, status: number, message?: string): void {
  if (stream.destroyed || stream.closed) return;
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () =>
    stream.sendTrailers({ 'grpc-status': String(status), ...(message ? { 'grpc-message': message } : {}) }),
  );
  stream.end(code === undefined ? undefined : frame(Buffer.from([0x08, code])));
}

/** gRPC's length-prefixed message: no compression, 4-byte big-endian length. */
function frame(message: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

function unframe(body: Buffer): Buffer {
  if (body.length < 5 || body[0] !== 0) throw new Error('not an uncompressed gRPC message');
  const length = body.readUInt32BE(1);
  if (body.length !== 5 + length) throw new Error('truncated gRPC message');
  return body.subarray(5);
}

/** The value of the first descriptor entry keyed `source` in a RateLimitRequest. */
export function sourceOf(request: Buffer): string | undefined {
  for (const [field, descriptor] of fields(request)) {
    if (field !== 2 || !Buffer.isBuffer(descriptor)) continue;
    for (const [f, entry] of fields(descriptor)) {
      if (f !== 1 || !Buffer.isBuffer(entry)) continue;
      let key: string | undefined;
      let value: string | undefined;
      for (const [g, v] of fields(entry)) {
        if (!Buffer.isBuffer(v)) continue;
        if (g === 1) key = v.toString('utf8');
        if (g === 2) value = v.toString('utf8');
      }
      if (key === SOURCE_DESCRIPTOR_KEY && value !== undefined) return value;
    }
  }
  return undefined;
}

/** A protobuf message's fields in order: (number, bytes of a length-delimited field or a number). */
function* fields(message: Buffer): Generator<[number, Buffer | number]> {
  let at = 0;
  const varint = (): number => {
    let value = 0;
    let scale = 1;
    for (;;) {
      if (at >= message.length) throw new Error('truncated varint');
      const byte = message[at++] as number;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value;
      scale *= 128;
      if (scale > 2 ** 63) throw new Error('varint too long');
    }
  };
  while (at < message.length) {
    const tag = varint();
    const field = Math.floor(tag / 8);
    switch (tag & 7) {
      case 0:
        yield [field, varint()];
        break;
      case 1:
        at += 8;
        break;
      case 2: {
        const length = varint();
        if (at + length > message.length) throw new Error('truncated field');
        yield [field, message.subarray(at, at + length)];
        at += length;
        break;
      }
      case 5:
        at += 4;
        break;
      default:
        throw new Error(`unsupported wire type ${tag & 7}`);
    }
  }
}
