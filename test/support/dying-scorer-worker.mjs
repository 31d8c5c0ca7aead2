// A stand-in scoring worker for the pool's supervision tests: it answers with fixed scores, except
// for an image 13 px wide, on which it dies mid-job as a crashing native decoder would.
import { parentPort } from 'node:worker_threads';

const scores = { drawing: 0, hentai: 0, neutral: 1, porn: 0, sexy: 0 };
parentPort.on('message', ({ id, probed }) => {
  if (probed.width === 13) process.exit(70);
  parentPort.postMessage({ id, ok: true, scores, decodeStartedAt: Date.now(), decodeMs: 1, inferenceMs: 1 });
});
parentPort.postMessage({ ready: true });
