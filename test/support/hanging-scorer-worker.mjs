// A stand-in scoring worker for the pool's deadline tests; never used outside tests. An image 21 px
// wide spins in JavaScript (termination interrupts it); one 22 px wide blocks this thread in native
// code — opening the FIFO whose path the image bytes carry, which returns only once the test opens it
// for writing — as a decoder looping in C would (it first creates `<fifo>.held`, for a test to wait
// on). Other images are answered at once.
import { openSync, writeFileSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';

const scores = { drawing: 0, hentai: 0, neutral: 1, porn: 0, sexy: 0 };
parentPort.on('message', ({ id, bytes, probed }) => {
  if (probed.width === 21) for (;;);
  if (probed.width === 22) {
    const fifo = new TextDecoder().decode(bytes);
    writeFileSync(`${fifo}.held`, '');
    openSync(fifo, 'r');
  }
  parentPort.postMessage({ id, ok: true, scores, decodeStartedAt: Date.now(), decodeMs: 1, inferenceMs: 1 });
});
parentPort.postMessage({ ready: true });
