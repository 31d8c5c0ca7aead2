import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { readImage, sha256InSlices } from './intake.ts';

const limits = { maxBytes: 52_428_800, idleTimeoutMs: 10_000 };

describe('intake: the image hashed only once it is taken', () => {
  it('reads the body without hashing it', async () => {
    const body = Buffer.from('not an image, but bytes');
    const intake = await readImage(Readable.from([body]), { 'content-type': 'image/png' }, limits);
    expect(intake.bytes.equals(body)).toBe(true);
    expect(intake).not.toHaveProperty('sha256');
  });

  it('hashes 50 MB in slices: the one-pass SHA-256, with the event loop turning in between', async () => {
    const bytes = Buffer.alloc(50_000_000);
    for (let i = 0; i < bytes.length; i += 4093) bytes[i] = i & 0xff;
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    const sha256 = await sha256InSlices(bytes);
    clearInterval(ticker);
    expect(sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(turns).toBeGreaterThan(0);
    expect(await sha256InSlices(Buffer.from('abc'))).toBe(createHash('sha256').update('abc').digest('hex'));
  });
});
