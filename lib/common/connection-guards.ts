// What the HTTP layer answers before (or instead of) a route: malformed framing, oversized headers,
// request time-outs, `Expect: 100-continue` over the upload limit, and the way a refused upload's
// connection is closed. Every such answer is a full HTTP/1.1 response in the envelope of spec 2.1,
// like any refusal a route sends.

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ApiError } from './errors.ts';

export interface LingerOptions {
  /** The most bytes read and dropped before the connection is cut. */
  maxBytes: number;
  /** The longest time spent lingering, in ms. */
  maxMs: number;
  /** Cut when nothing arrives for this long, in ms (a stalled client sends nothing more). */
  idleMs: number;
}

/** Destroys a real socket (light-my-request's stand-in for tests has no `destroy`). */
export function destroySocket(socket: Socket | null | undefined): void {
  if (socket && typeof socket.destroy === 'function') socket.destroy();
}

/**
 * Closes the connection of a request whose body was refused, so that a client that writes its whole
 * body before reading (most do) still reads our answer: closing with unread data makes the kernel
 * send a reset, and a reset throws away the answer waiting in the client's receive buffer. So, as
 * nginx's "lingering close" does, once the answer is out we send our FIN, keep reading and dropping
 * the rest of the body, and destroy the socket when the client closes its side, or past
 * `maxBytes` / `maxMs`, or after `idleMs` without data (a client that sends more, or more slowly,
 * was never going to read it).
 *
 * Node ends a `Connection: close` response with `socket.destroySoon()`, which resets a connection
 * that still has body bytes in flight; that one call is replaced on this socket.
 */
export function lingerOnClose(req: IncomingMessage, opts: LingerOptions): void {
  const socket = req.socket as (Socket & { destroySoon?: () => void }) | null;
  if (!socket || socket.destroyed || typeof socket.destroy !== 'function') return;
  // Whoever was reading the body (intake, busboy) has given up: drop the rest, counted.
  req.unpipe();
  req.removeAllListeners('data');
  let read = 0;
  const cut = () => destroySocket(socket);
  const timer = setTimeout(cut, opts.maxMs);
  timer.unref();
  const idle = setTimeout(cut, opts.idleMs);
  idle.unref();
  req.on('data', (chunk: Buffer) => {
    idle.refresh();
    read += chunk.length;
    if (read > opts.maxBytes) cut();
  });
  req.on('error', cut);
  req.resume();
  socket.once('close', () => {
    clearTimeout(timer);
    clearTimeout(idle);
  });
  socket.destroySoon = () => {
    socket.once('end', cut); // the client closed its side: it has what it will read
    socket.end(); // FIN after the answer already queued; reading goes on
  };
}

/**
 * Reads and drops the rest of a request body: true once it has ended, false (reading stops) past
 * `maxBytes`, `maxMs`, `idleMs` without data, or a broken stream. Never stored.
 */
export function readToEnd(req: IncomingMessage, opts: LingerOptions): Promise<boolean> {
  if (req.readableEnded) return Promise.resolve(true);
  return new Promise((resolve) => {
    let read = 0;
    const finish = (ended: boolean) => {
      clearTimeout(timer);
      clearTimeout(idle);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onFailure);
      req.off('close', onClose);
      if (!ended) req.pause();
      resolve(ended);
    };
    const timer = setTimeout(() => finish(false), opts.maxMs);
    timer.unref();
    const idle = setTimeout(() => finish(false), opts.idleMs);
    idle.unref();
    const onData = (chunk: Buffer) => {
      idle.refresh();
      read += chunk.length;
      if (read > opts.maxBytes) finish(false);
    };
    const onEnd = () => finish(true);
    const onFailure = () => finish(false);
    const onClose = () => finish(req.readableEnded);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onFailure);
    req.once('close', onClose);
    req.resume();
  });
}

/** A complete raw response: status line, envelope body, `Connection: close`. */
export function rawEnvelopeResponse(err: ApiError, extraHeaders: Record<string, string> = {}): string {
  const body = JSON.stringify(err.body());
  const reason = STATUS_TEXT[err.status] ?? 'Error';
  const headers = {
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
    ...err.headers,
    ...extraHeaders,
  };
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}`);
  return `HTTP/1.1 ${err.status} ${reason}\r\n${lines.join('\r\n')}\r\n\r\n${body}`;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

/** Node's llhttp errors carry the parser's code, its reason and the bytes it was parsing. */
export interface ClientError extends Error {
  code?: string;
  reason?: string;
  /** A Buffer at run time (Fastify's type says otherwise). */
  rawPacket?: unknown;
}

export interface ClientErrorOptions {
  /** The methods a path is routed for (empty: no such route), for 405 and its `Allow`. */
  allowedMethods: (path: string) => string[];
  /** Counts the refusal (its code) for the refusal log. */
  onRefused?: (code: number) => void;
}

/** The request target of the first request line in `raw`, if there is one. */
function requestPath(raw: unknown): string | undefined {
  if (!Buffer.isBuffer(raw)) return undefined;
  const line = raw.subarray(0, Math.min(raw.length, 8192)).toString('latin1').split('\r\n', 1)[0] ?? '';
  const target = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ (\S+) HTTP\/\d\.\d$/.exec(line)?.[1];
  return target?.split('?')[0];
}

/** The refusal for an error the HTTP parser (or Node's request timer) raised on a connection. */
export function clientErrorRefusal(err: ClientError, opts: ClientErrorOptions): ApiError {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('REQUEST_TIMEOUT');
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('HEADERS_TOO_LARGE');
    case 'HPE_INVALID_METHOD': {
      // llhttp knows only registered methods: `FOO /api/public/detect` never reaches the router.
      const path = requestPath(err.rawPacket);
      const allowed = path === undefined ? [] : opts.allowedMethods(path);
      if (path !== undefined && allowed.length > 0) {
        return new ApiError('METHOD_NOT_ALLOWED', `Method not allowed on ${path}`, {
          allow: allowed.join(', '),
        });
      }
      return new ApiError('BAD_REQUEST', 'Bad request: unknown HTTP method');
    }
  }
  const reason = err.reason ?? err.message;
  return new ApiError('BAD_REQUEST', `Bad request: malformed HTTP (${reason})`);
}

/**
 * The `clientError` handler: answers in the envelope and closes. Like Node's own handler, it writes
 * only when no response of ours has started on the socket (a raw write would corrupt it).
 */
export function handleClientError(err: ClientError, socket: Socket, opts: ClientErrorOptions): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const current = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && !current?.headersSent) {
    const refusal = clientErrorRefusal(err, opts);
    opts.onRefused?.(refusal.code);
    socket.end(rawEnvelopeResponse(refusal));
    // A request cut by the timer may still be sending: give our answer a moment to leave.
    setTimeout(() => socket.destroy(), 1000).unref();
    return;
  }
  socket.destroy();
}

export interface ExpectGuardOptions {
  /** The file limit: the largest raw body any route accepts. */
  maxFileBytes: number;
  /** Multipart framing allowed on top of the file limit (as intake allows it). */
  framingBytes: number;
  linger: LingerOptions;
  onRefused?: (code: number) => void;
}

/**
 * `Expect: 100-continue`: a body declared over the limit is refused at once with 4003 — never
 * `100 Continue` first, so a well-behaved client does not send 50 MB for nothing. Anything else gets
 * its `100 Continue` and goes on to the app as usual (Fastify itself does not listen for this event).
 */
export function installExpectGuard(server: Server, opts: ExpectGuardOptions): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    const declared = Number(req.headers['content-length']);
    const multipart = /^\s*multipart\//i.test(req.headers['content-type'] ?? '');
    const limit = opts.maxFileBytes + (multipart ? opts.framingBytes : 0);
    if (Number.isFinite(declared) && declared > limit) {
      const err = new ApiError('FILE_TOO_LARGE', `File too large: the limit is ${opts.maxFileBytes} bytes`);
      opts.onRefused?.(err.code);
      const body = JSON.stringify(err.body());
      // Clients that stop waiting for 100 Continue send the body anyway: linger for them.
      lingerOnClose(req, opts.linger);
      res.writeHead(err.status, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(body),
        connection: 'close',
      });
      res.end(body);
      return;
    }
    res.writeContinue();
    server.emit('request', req, res);
  });
}
