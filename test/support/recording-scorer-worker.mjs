// A stand-in scoring worker for the pool's scheduling tests. It holds each image for `probed.frames`
// milliseconds and answers with what it saw, encoded in the scores: `porn` = images this worker held
// at once (this one included), `sexy` = large ones among them, `neutral` = 1 if sent as solo,
// `drawing` = the worker's soloThreads.
import { parentPort, workerData } from 'node:worker_threads';

const LARGE = 32 * 1024 * 1024;
const held = new Map();
parentPort.on('message', ({ id, bytes, probed, solo }) => {
  held.set(id, bytes.byteLength + probed.width * probed.height * 3 > LARGE);
  const large = [...held.values()].filter(Boolean).length;
  const scores = {
    drawing: workerData.soloThreads,
    hentai: 0,
    neutral: solo ? 1 : 0,
    porn: held.size,
    sexy: large,
  };
  setTimeout(() => {
    held.delete(id);
    parentPort.postMessage({
      id,
      ok: true,
      scores,
      decodeStartedAt: Date.now(),
      decodeMs: 1,
      inferenceMs: 1,
    });
  }, probed.frames);
});
parentPort.postMessage({ ready: true });
