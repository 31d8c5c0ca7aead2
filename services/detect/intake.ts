// Intake: turns a request body into the image bytes, held in memory only. Both ways of spec 4.1 —
// one multipart part named `file`, or a raw `image/*` body. The size limit is enforced while the body
// streams in: an oversize upload is refused at the first byte past the limit (or at once, from
// Content-Length) and the rest is never read. An image whose header walk passes its bound is refused
// while it streams in, too, in every framing (streamed-header.ts): the rest is never copied.

import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { Busboy, type BusboyFileStream } from '@fastify/busboy';
import { ApiError } from '../../lib/common/errors.ts';
import { FRAMING_BYTES } from '../../lib/common/http-limits.ts';
import { BodyBuffer } from './body-buffer.ts';
import type { UploadConfig } from './config.ts';
import { type Walk, walkInSlices } from './image/probe-bytes.ts';
import { formatFromMimeType } from './image/sniff.ts';
import type { ImageFormat } from './image/types.ts';
import { type HeaderWatch, watchHeader } from './streamed-header.ts';

export interface Intake {
  bytes: Buffer;
  /** The format a raw body's Content-Type names; multipart part types are never trusted. */
  declaredFormat?: ImageFormat | undefined;
  /** A raw body's Content-Type named an image type outside the whitelist. */
  declaredUnsupported?: string | undefined;
}

/** What a raw body's Content-Type says of the image (never trusted to decide its format). */
export type Declared = Pick<Intake, 'declaredFormat' | 'declaredUnsupported'>;

/**
 * Detect's header steps (read-header.ts) for a body's first bytes and what it declares: rejects with
 * the refusal the whole body would get. With one, a raw body is refused as soon as its walk passes its
 * bound (streamed-header.ts).
 */
export type PrefixVerdict = (bytes: Uint8Array, declared: Declared) => Promise<unknown>;

const CONTENT_TYPE_HINT =
  'send multipart/form-data with one part named "file", or the raw image with Content-Type image/*';

// Both refusals below end the connection: the rest of such a body is not worth reading.
function tooLarge(maxBytes: number): ApiError {
  return new ApiError('FILE_TOO_LARGE', `File too large: the limit is ${maxBytes} bytes`, {
    connection: 'close',
  });
}

function mediaType(contentType: string): string {
  return (contentType.split(';')[0] ?? '').trim().toLowerCase();
}

/** Refuses before reading a byte when the request names a size over the limit. */
function checkContentLength(headers: IncomingHttpHeaders, maxBytes: number, overhead = 0): void {
  const declared = Number(headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes + overhead) throw tooLarge(maxBytes);
}

export interface IntakeLimits {
  maxBytes: number;
  /** An upload that sends nothing for this long is refused (4001) instead of holding its slot. */
  idleTimeoutMs: number;
  /** An upload averaging less than this (bytes/s) after `minRateGraceMs` is refused (4001); 0: off. */
  minBytesPerSecond?: number;
  minRateGraceMs?: number;
}

/** The intake limits a configuration sets (every composition that serves detect uses these). */
export function intakeLimitsFrom(
  config: Omit<UploadConfig, 'limits' | 'concurrency'> & { maxFileBytes: number },
): IntakeLimits {
  return {
    maxBytes: config.maxFileBytes,
    idleTimeoutMs: config.uploadIdleTimeoutMs,
    minBytesPerSecond: config.uploadMinBytesPerSecond,
    minRateGraceMs: config.uploadMinRateGraceMs,
  };
}

/** The memory the upload may take: asked for every chunk as it arrives. */
export interface UploadBudget {
  /** False when `bytes` more would pass the bound; the upload is then cut with `refusal()`. */
  holdBytes(bytes: number): boolean;
  refusal(): ApiError;
}

function stalled(idleTimeoutMs: number): ApiError {
  return new ApiError('BAD_REQUEST', `Upload stalled: no data for ${idleTimeoutMs / 1000} s`, {
    connection: 'close',
  });
}

function tooSlow(bytes: number, ms: number, minBytesPerSecond: number): ApiError {
  return new ApiError(
    'BAD_REQUEST',
    `Upload too slow: ${bytes} bytes in ${(ms / 1000).toFixed(1)} s, below the minimum of ${minBytesPerSecond} bytes/s`,
    { connection: 'close' },
  );
}

/**
 * Watches an upload as it streams in: calls `onFail` once when it idles for `idleTimeoutMs`, when its
 * average rate stays under the minimum past the grace period (a trickle must not hold a connection and
 * its admission for minutes), or when the budget refuses a chunk. Returns the function that stops it.
 */
function watchUpload(
  stream: Readable,
  limits: IntakeLimits,
  budget: UploadBudget | undefined,
  onFail: (err: ApiError) => void,
): () => void {
  const started = performance.now();
  const minRate = limits.minBytesPerSecond ?? 0;
  let bytes = 0;
  let stopped = false;
  const fail = (err: ApiError) => {
    if (stopped) return;
    stop();
    onFail(err);
  };
  const idle = setTimeout(() => fail(stalled(limits.idleTimeoutMs)), limits.idleTimeoutMs);
  let rateTimer: NodeJS.Timeout | undefined;
  // Checked when the average would fall under the minimum if nothing more arrived — not on a tick.
  const checkRate = () => {
    const elapsed = performance.now() - started;
    if (bytes < (minRate * elapsed) / 1000) return fail(tooSlow(bytes, elapsed, minRate));
    const due = (bytes / minRate) * 1000;
    rateTimer = setTimeout(checkRate, Math.max(100, due - elapsed));
  };
  if (minRate > 0) rateTimer = setTimeout(checkRate, limits.minRateGraceMs ?? 0);
  const onData = (chunk: Buffer) => {
    idle.refresh();
    bytes += chunk.length;
    if (budget && !budget.holdBytes(chunk.length)) fail(budget.refusal());
  };
  stream.on('data', onData);
  const stop = () => {
    stopped = true;
    clearTimeout(idle);
    clearTimeout(rateTimer);
    stream.off('data', onData);
  };
  return stop;
}

export async function readImage(
  body: Readable | undefined,
  headers: IncomingHttpHeaders,
  limits: IntakeLimits,
  budget?: UploadBudget,
  verdict?: PrefixVerdict,
) {
  const { maxBytes } = limits;
  const contentType = headers['content-type'];
  if (!contentType) throw new ApiError('BAD_REQUEST', `Missing Content-Type: ${CONTENT_TYPE_HINT}`);
  const type = mediaType(contentType);
  if (type === 'multipart/form-data') {
    if (!body) throw new ApiError('BAD_REQUEST', 'No file: the multipart body is empty');
    return readMultipart(body, headers, limits, budget, watchFor(verdict, {}));
  }
  if (type.startsWith('image/')) {
    if (!body) throw new ApiError('BAD_REQUEST', 'No file: the request body is empty');
    checkContentLength(headers, maxBytes);
    const declaredFormat = formatFromMimeType(type);
    const declaredUnsupported = declaredFormat ? undefined : type;
    const declared: Declared = { declaredFormat, declaredUnsupported };
    const length = Number(headers['content-length']);
    const bytes = await collect(body, limits, length, budget, watchFor(verdict, declared));
    if (bytes.length === 0) throw new ApiError('BAD_REQUEST', 'No file: the request body is empty');
    return { bytes, ...declared } satisfies Intake;
  }
  throw new ApiError('BAD_REQUEST', `Wrong Content-Type "${type}": ${CONTENT_TYPE_HINT}`);
}

/**
 * How a body is watched as it arrives (streamed-header.ts): given the most it can be, and how to refuse
 * it. Every framing is watched — a raw body with or without a Content-Length, and a multipart part (its
 * type never trusted: nothing declared) — so that none is a way around the early refusal.
 */
type WatchFor = (mostBytes: number, refuse: (err: ApiError) => void) => HeaderWatch | undefined;

function watchFor(verdict: PrefixVerdict | undefined, declared: Declared): WatchFor | undefined {
  return verdict && ((most, refuse) => watchHeader(most, (prefix) => verdict(prefix, declared), refuse));
}

/**
 * Collects a stream into one buffer (body-buffer.ts), refusing at the first byte past `maxBytes`, or
 * when `watch`'s header walk refuses the part that has arrived (walked where it lies, never copied).
 */
function collect(
  stream: Readable,
  limits: IntakeLimits,
  expectedLength = Number.NaN,
  budget?: UploadBudget,
  watch?: WatchFor,
): Promise<Buffer> {
  const { maxBytes } = limits;
  return new Promise<Buffer>((resolve, reject) => {
    // The most the body can be: its Content-Length, else the size limit (a chunked body).
    const most = Number.isInteger(expectedLength) && expectedLength > 0 ? expectedLength : maxBytes;
    const body = new BodyBuffer(most);
    let done = false;
    const finish = (err: ApiError | null) => {
      if (done) return;
      done = true;
      stopWatching();
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
      stream.off('aborted', onAborted);
      watcher?.stop();
      if (err) {
        // Stop reading; the error handler drops the rest (or closes the connection, for `connection:
        // close` errors). The buffer is freed now, not at the next collection (app.ts says why).
        stream.pause();
        body.release();
        reject(err);
      } else resolve(body.take());
    };
    const onData = (chunk: Buffer) => {
      if (done) return;
      if (body.size + chunk.length > maxBytes) return finish(tooLarge(maxBytes));
      if (!body.append(chunk))
        return finish(new ApiError('BAD_REQUEST', 'Body longer than its Content-Length'));
      watcher?.grew(body.view());
    };
    const onEnd = () => finish(null);
    const onError = () => finish(new ApiError('BAD_REQUEST', 'The upload was interrupted'));
    const onAborted = () => finish(new ApiError('BAD_REQUEST', 'The upload was aborted'));
    const stopWatching = watchUpload(stream, limits, budget, (err) => finish(err));
    const watcher = watch?.(most, (err) => finish(err));
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('error', onError);
    stream.once('aborted', onAborted);
  });
}

// Non-file fields are allowed (and ignored) but bounded, so a form cannot become a memory sink.
const FORM_LIMITS = { fields: 16, fieldSize: 64 * 1024, fieldNameSize: 200, parts: 32, headerPairs: 64 };

function readMultipart(
  body: Readable,
  headers: IncomingHttpHeaders,
  limits: IntakeLimits,
  budget: UploadBudget | undefined,
  watch: WatchFor | undefined,
): Promise<Intake> {
  const { maxBytes } = limits;
  checkContentLength(headers, maxBytes, FRAMING_BYTES);
  // The part is at most the whole body, when its length is announced.
  const declaredLength = Number(headers['content-length']);
  const most =
    Number.isInteger(declaredLength) && declaredLength > 0 ? Math.min(declaredLength, maxBytes) : maxBytes;
  return new Promise<Intake>((resolve, reject) => {
    let settled = false;
    let files = 0;
    let part: Part | undefined;
    let parser: InstanceType<typeof Busboy>;
    const fail = (err: ApiError) => {
      if (settled) return;
      settled = true;
      stopWatching();
      part?.cancel(err);
      body.unpipe(parser);
      body.pause();
      reject(err);
    };
    try {
      parser = new Busboy({
        headers: headers as IncomingHttpHeaders & { 'content-type': string },
        // Two files are counted so that the second one can be refused, not silently dropped.
        limits: { ...FORM_LIMITS, files: 2, fileSize: maxBytes },
        // A part named `file` is the image even when the client sent no filename.
        isPartAFile: (name, _type, fileName) => name === 'file' || fileName !== undefined,
      });
    } catch (err) {
      throw new ApiError('BAD_REQUEST', `Malformed multipart request: ${(err as Error).message}`);
    }
    parser.on('file', (name: string, stream: BusboyFileStream) => {
      files += 1;
      if (name !== 'file')
        return fail(new ApiError('BAD_REQUEST', `The file part must be named "file", got "${name}"`));
      if (files > 1)
        return fail(new ApiError('BAD_REQUEST', 'More than one file: send exactly one part named "file"'));
      part = collectPart(stream, maxBytes, most, watch);
      part.done.catch(fail);
    });
    parser.on('partsLimit', () => fail(new ApiError('BAD_REQUEST', 'Too many multipart parts')));
    parser.on('fieldsLimit', () => fail(new ApiError('BAD_REQUEST', 'Too many multipart fields')));
    parser.on('error', (err: Error) =>
      fail(new ApiError('BAD_REQUEST', `Malformed multipart request: ${err.message}`)),
    );
    parser.on('finish', () => {
      if (settled) return;
      if (!part) return fail(new ApiError('BAD_REQUEST', 'No file: send one multipart part named "file"'));
      part.done.then((bytes) => {
        if (settled) return;
        if (bytes.length === 0) return fail(new ApiError('BAD_REQUEST', 'No file: the "file" part is empty'));
        settled = true;
        stopWatching();
        resolve({ bytes });
      }, fail);
    });
    body.on('aborted', () => fail(new ApiError('BAD_REQUEST', 'The upload was aborted')));
    body.on('error', () => fail(new ApiError('BAD_REQUEST', 'The upload was interrupted')));
    const stopWatching = watchUpload(body, limits, budget, fail);
    body.pipe(parser);
  });
}

/** The file part being read: its bytes, or how to stop reading it (the form failed elsewhere). */
interface Part {
  done: Promise<Buffer>;
  cancel(err: ApiError): void;
}

function collectPart(
  stream: BusboyFileStream,
  maxBytes: number,
  most: number,
  watch: WatchFor | undefined,
): Part {
  let cancel: (err: ApiError) => void = () => {};
  const done = new Promise<Buffer>((resolve, reject) => {
    const body = new BodyBuffer(most);
    let ended = false;
    const finish = (err: ApiError | null) => {
      if (ended) return;
      ended = true;
      watcher?.stop();
      stream.off('data', onData);
      if (err) {
        // Busboy drops the rest of a part nobody reads; the request's own handlers end the body.
        stream.resume();
        body.release();
        reject(err);
      } else resolve(body.take());
    };
    const onData = (chunk: Buffer) => {
      if (ended) return;
      if (!body.append(chunk)) return finish(tooLarge(maxBytes));
      watcher?.grew(body.view());
    };
    const watcher = watch?.(most, (err) => finish(err));
    stream.on('data', onData);
    // Busboy stops at fileSize and emits 'limit': refuse rather than score a truncated image.
    stream.once('limit', () => finish(tooLarge(maxBytes)));
    stream.once('error', () => finish(new ApiError('BAD_REQUEST', 'The upload was interrupted')));
    stream.once('end', () => finish(stream.truncated ? tooLarge(maxBytes) : null));
    cancel = finish;
  });
  return { done, cancel };
}

/** Bytes hashed in one step of sha256InSlices: ~0.2 ms. */
const HASH_STEP_BYTES = 256 * 1024;

function* hashWalk(bytes: Uint8Array): Walk<string> {
  const hash = createHash('sha256');
  for (let at = 0; at < bytes.length; at += HASH_STEP_BYTES) {
    hash.update(bytes.subarray(at, at + HASH_STEP_BYTES));
    yield;
  }
  return hash.digest('hex');
}

/**
 * The SHA-256 of an image that is going to be scored, hex. Hashed once the image is taken, not as it
 * streams in: an upload refused for its format, header, walk or cost (a 4.3 M-chunk PNG) is never
 * hashed, and a 50 MB one is hashed in the header walks' slices (walkInSlices), never in one piece.
 */
export function sha256InSlices(bytes: Uint8Array): Promise<string> {
  return walkInSlices(hashWalk(bytes));
}
