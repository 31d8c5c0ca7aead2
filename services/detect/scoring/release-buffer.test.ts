import { describe, expect, it } from 'vitest';
import { releaseBuffer } from './release-buffer.ts';

describe('releaseBuffer', () => {
  it('detaches a buffer the view spans whole, so its memory is freed now', () => {
    const tensor = new Float32Array(224 * 224 * 3).fill(0.5);
    releaseBuffer(tensor);
    expect(tensor.buffer.detached).toBe(true);
    expect(tensor.length).toBe(0);
    releaseBuffer(tensor); // already released: nothing to do
  });

  it('leaves a view into part of a buffer alone (a pooled Buffer, a slice)', () => {
    const pooled = Buffer.from('a small upload');
    expect(pooled.byteLength).toBeLessThan(pooled.buffer.byteLength);
    releaseBuffer(pooled);
    expect(pooled.toString()).toBe('a small upload');

    const whole = new Uint8Array(64).fill(7);
    const tail = whole.subarray(8);
    releaseBuffer(tail);
    expect(whole.buffer.detached).toBe(false);
    expect(tail[0]).toBe(7);
  });

  it('leaves shared memory alone', () => {
    const shared = new Uint8Array(new SharedArrayBuffer(16)).fill(3);
    releaseBuffer(shared);
    expect(shared[15]).toBe(3);
  });
});
