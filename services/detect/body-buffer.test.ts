import { describe, expect, it } from 'vitest';
import { BodyBuffer } from './body-buffer.ts';
import { FIRST_PREFIX_BYTES } from './streamed-header.ts';

const MiB = 1024 * 1024;
const bytes = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);

describe('body buffer: an upload gathered as it arrives', () => {
  it('holds an ordinary photo in one exact allocation', () => {
    const body = new BodyBuffer(300_000);
    const data = bytes(300_000, 1);
    for (let at = 0; at < data.length; at += 65_536)
      expect(body.append(data.subarray(at, at + 65_536))).toBe(true);
    const taken = body.take();
    expect(taken.equals(data)).toBe(true);
    expect(taken.buffer.byteLength).toBe(300_000);
  });

  it('has reserved 1 + 4 + 16 MiB, not the announced 52 MB, when a body is refused past its first 4 MiB', () => {
    const body = new BodyBuffer(52 * MiB);
    expect(body.view().buffer.byteLength).toBe(FIRST_PREFIX_BYTES);
    body.append(bytes(4 * MiB, 2));
    expect(body.view().buffer.byteLength).toBe(4 * MiB);
    body.append(bytes(1, 3));
    expect(body.view().buffer.byteLength).toBe(16 * MiB);
    const view = body.view();
    body.release();
    expect(view.length).toBe(0);
  });

  it('keeps what a view showed while the body grows past it, and ends at its own size', () => {
    const data = bytes(6 * MiB + 123, 4);
    const body = new BodyBuffer(50 * MiB);
    const views: [Uint8Array, number][] = [];
    for (let at = 0; at < data.length; at += 700_001) {
      body.append(data.subarray(at, at + 700_001));
      views.push([body.view(), body.size]);
    }
    for (const [view, size] of views) expect(Buffer.from(view).equals(data.subarray(0, size))).toBe(true);
    const taken = body.take();
    expect(taken.equals(data)).toBe(true);
    // Grown to 16 MiB for 6 MiB: handed over in a buffer of its own size.
    expect(taken.buffer.byteLength).toBe(data.length);
  });

  it('appends nothing past the most the body can be', () => {
    const body = new BodyBuffer(10);
    expect(body.append(bytes(8, 5))).toBe(true);
    expect(body.append(bytes(3, 6))).toBe(false);
    expect(body.take().equals(bytes(8, 5))).toBe(true);
  });
});
