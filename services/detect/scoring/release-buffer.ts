// V8 frees an off-heap buffer (an upload handed to a scoring worker, a model input) only when a
// collection finds it dead, and a worker thread lets tens of MB of them pile up before it collects:
// measured, ~45 MiB per scoring worker under load. The worker knows when it is done with one, and
// detaching an ArrayBuffer (transfer to length 0) frees its memory at once.

/**
 * Frees the memory behind `view` now, when `view` is all of a plain ArrayBuffer (not a slice of a
 * pooled or shared one). The caller must own it: every other view of it becomes empty.
 */
export function releaseBuffer(view: ArrayBufferView): void {
  const { buffer } = view;
  if (!(buffer instanceof ArrayBuffer) || buffer.detached) return;
  if (view.byteOffset !== 0 || view.byteLength !== buffer.byteLength) return;
  buffer.transfer(0);
}
