// A body refused while it streams in gets exactly the answer the whole body gets, and a body that is not
// refused is read, walked and costed exactly as before: every corpus file and every hostile fixture,
// fed whole and in random chunk splits (seeded: a failure names its seed), compared field by field.

import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { isApiError } from '../../lib/common/errors.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { CORPUS, fixture } from '../../test/fixtures/corpus.ts';
import { HOSTILE_IMAGES, type HostileImageName, hostileImage } from '../../test/support/hostile-images.ts';
import { multipart } from '../../test/support/multipart.ts';
import { prng } from '../../test/support/prng.ts';
import { BodyBuffer } from './body-buffer.ts';
import { costFacts } from './image/probe.ts';
import { DEFAULT_DIMENSION_LIMITS } from './image/types.ts';
import { type Declared, readImage } from './intake.ts';
import { readHeader } from './read-header.ts';
import { FIRST_PREFIX_BYTES, watchHeader } from './streamed-header.ts';

const limits = DEFAULT_DIMENSION_LIMITS;
const MAX_TILES = SETTINGS.MAX_TILES.default;

type Answer =
  | { ok: { format: string; probed: unknown; facts: unknown } }
  | { refused: { code: number; status: number; message: string; headers: unknown } };

/** Detect's answer for the whole body: its header steps, then the cost facts of a taken image. */
async function answer(bytes: Uint8Array, declared: Declared): Promise<Answer> {
  try {
    const { format, probed } = await readHeader(bytes, declared, limits);
    return { ok: { format, probed, facts: costFacts(bytes, probed, MAX_TILES, 4) } };
  } catch (err) {
    if (!isApiError(err)) throw err;
    return { refused: { code: err.code, status: err.status, message: err.message, headers: err.headers } };
  }
}

const refusedAs = (err: unknown): Answer => {
  if (!isApiError(err)) throw err;
  return { refused: { code: err.code, status: err.status, message: err.message, headers: err.headers } };
};

/**
 * Streams `file` into one buffer in random chunks (1 B – 256 KiB, the event loop turning at random
 * between them so that the prefix walks run at random points), watched from a random first prefix.
 * Returns the answer and how many bytes had arrived when it was given.
 */
async function streamed(
  file: Uint8Array,
  declared: Declared,
  seed: number,
): Promise<{ answer: Answer; arrived: number }> {
  const next = prng(seed);
  // Intake's buffer, grown as the body arrives (a walked view must keep its bytes through the growth).
  const body = new BodyBuffer(file.length);
  let refusal: Answer | undefined;
  let refusedAt = -1;
  // From 16 bytes up: every file's prefixes are walked, not only those of bodies over a megabyte.
  const first = 16 + Math.floor(next() * 64 * 1024);
  const watch = watchHeader(
    file.length,
    (prefix) => readHeader(prefix, declared, limits),
    (err) => {
      refusal = refusedAs(err);
      refusedAt = body.size;
    },
    first,
  );
  while (body.size < file.length && refusal === undefined) {
    const at = body.size;
    const n = Math.min(file.length - at, 1 + Math.floor(next() ** 3 * 256 * 1024));
    expect(body.append(file.subarray(at, at + n))).toBe(true);
    watch?.grew(body.view());
    if (next() < 0.3) await new Promise((resolve) => setImmediate(resolve));
  }
  // The last prefix walks finish (or not) before the end is seen, as they may in intake.
  for (let i = 0; i < 3 && refusal === undefined; i++) await new Promise((resolve) => setImmediate(resolve));
  watch?.stop();
  if (refusal) return { answer: refusal, arrived: refusedAt };
  const whole = body.take();
  expect(whole.equals(file)).toBe(true);
  return { answer: await answer(whole, declared), arrived: whole.length };
}

const DECLARED: Declared = {};
const SPLITS = 3;

describe('streamed header: the same answer as the whole body', () => {
  it.each(Object.keys(CORPUS))('corpus %s, whole and in random splits', async (name) => {
    const file = new Uint8Array(readFileSync(fixture(name)));
    const whole = await answer(file, DECLARED);
    for (let seed = 1; seed <= SPLITS; seed++) {
      const { answer: got } = await streamed(file, DECLARED, seed * 7919 + file.length);
      expect(got, `${name}, seed ${seed * 7919 + file.length}`).toEqual(whole);
    }
  });

  it.each(Object.keys(HOSTILE_IMAGES) as HostileImageName[])(
    'hostile %s, whole and in random splits',
    async (name) => {
      const file = await hostileImage(name);
      const whole = await answer(file, DECLARED);
      const splits = file.length > 8 * 1024 * 1024 ? 2 : SPLITS;
      for (let seed = 1; seed <= splits; seed++) {
        const { answer: got } = await streamed(file, DECLARED, seed * 104_729 + file.length);
        expect(got, `${name}, seed ${seed * 104_729 + file.length}`).toEqual(whole);
      }
    },
    120_000,
  );

  it('refuses the 4.3 M-chunk PNG and the 12.8 M-segment JPEG within their first few MB', async () => {
    for (const name of ['png-4m-empty-chunks', 'jpeg-12m-com-segments'] as const) {
      const file = await hostileImage(name);
      const whole = await answer(file, DECLARED);
      expect(whole).toMatchObject({ refused: { code: 4005, status: 400 } });
      for (let seed = 1; seed <= 3; seed++) {
        const { answer: got, arrived } = await streamed(file, DECLARED, seed);
        expect(got).toEqual(whole);
        expect(arrived, name).toBeLessThan(8 * 1024 * 1024);
      }
    }
  }, 120_000);

  it('answers a declared type that contradicts the bytes (4001) before the walk, as the whole body does', async () => {
    const file = await hostileImage('png-4m-empty-chunks');
    for (const declared of [{ declaredFormat: 'jpeg' }, { declaredUnsupported: 'image/svg+xml' }] as const) {
      const whole = await answer(file, declared);
      expect(whole).toMatchObject({ refused: { code: 4001 } });
      expect((await streamed(file, declared, 5)).answer).toEqual(whole);
    }
  }, 120_000);
});

describe('intake: an image refused while it streams in, in every framing', () => {
  /**
   * An upload of `file` framed as `framing`, in 64 KiB chunks, one a turn of the event loop as from a
   * socket, counting what was read of it.
   */
  function upload(file: Buffer, framing: Framing, type: string) {
    const form = multipart([{ name: 'file', filename: 'x', contentType: type, data: file }]);
    const [sent, headers]: [Buffer, Record<string, string>] =
      framing === 'multipart'
        ? [form.body, { 'content-type': form.contentType }]
        : [file, { 'content-type': type }];
    // A chunked body announces no length.
    if (framing !== 'chunked') headers['content-length'] = String(sent.length);
    let read = 0;
    const body = Readable.from(
      (async function* () {
        for (let at = 0; at < sent.length; at += 65_536) {
          await new Promise((resolve) => setImmediate(resolve));
          read = Math.min(sent.length, at + 65_536);
          yield sent.subarray(at, at + 65_536);
        }
      })(),
    );
    return { body, headers, read: () => read };
  }
  type Framing = 'raw' | 'chunked' | 'multipart';
  const FRAMINGS: Framing[] = ['raw', 'chunked', 'multipart'];
  const intakeLimits = { maxBytes: 52_428_800, idleTimeoutMs: 10_000 };
  const verdict = (prefix: Uint8Array, declared: Declared) => readHeader(prefix, declared, limits);

  it.each(FRAMINGS)(
    'refuses the 4.3 M-chunk PNG %s with the whole body’s answer, having read a few MB of its 51',
    async (framing) => {
      const file = await hostileImage('png-4m-empty-chunks');
      const whole = await answer(file, DECLARED);
      const { body, headers, read } = upload(file, framing, 'image/png');
      const got = await readImage(body, headers, intakeLimits, undefined, verdict).then(
        () => undefined,
        (err: unknown) => refusedAs(err),
      );
      expect(got).toEqual(whole);
      expect(read()).toBeLessThan(8 * 1024 * 1024);
    },
    60_000,
  );

  it.each(FRAMINGS)(
    'takes an ordinary large image %s whole, byte for byte, its header answered as before',
    async (framing) => {
      const file = Buffer.from(readFileSync(fixture('gain-map.jpg')));
      expect(file.length).toBeGreaterThan(FIRST_PREFIX_BYTES);
      const { body, headers } = upload(file, framing, 'image/jpeg');
      const intake = await readImage(body, headers, intakeLimits, undefined, verdict);
      expect(intake.bytes.equals(file)).toBe(true);
      // Held at its own size, however it was framed.
      expect(intake.bytes.buffer.byteLength).toBeLessThan(file.length * 1.125);
      const declared: Declared = framing === 'multipart' ? {} : { declaredFormat: 'jpeg' };
      expect(await answer(intake.bytes, intake)).toEqual(await answer(file, declared));
    },
  );
});
