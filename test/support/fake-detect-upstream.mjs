// A stand-in detect pod for the edge's retry tests (test/e2e/edge-retry.test.ts): ready on
// /internal/ready, and on any other path reads the whole body, then answers 200 with its name and the
// bytes it read — or never answers (FAKE_DETECT_HANG=1; FAKE_DETECT_HANG_FROM_BYTES=n: only bodies of n
// bytes or more), holding the request until it is killed.
// FAKE_DETECT_READ_BYTES_PER_S reads the body that slowly (a detect pod slower than the client);
// FAKE_DETECT_ANSWER_DELAY_MS answers that long after the body's end (a busy pod); FAKE_DETECT_STATUS=503
// answers as a busy detect does; FAKE_DETECT_HEADERS (JSON) adds headers to that answer (a draining
// detect's mark).
// Prints {"msg":"listening","port":…} once bound, {"msg":"reading","url":…} at a body's first bytes and
// {"msg":"received","bytes":…} per body read.
//   FAKE_DETECT_NAME=a node test/support/fake-detect-upstream.mjs

import { createServer } from 'node:http';

const name = process.env.FAKE_DETECT_NAME ?? 'detect';
const hangFrom =
  process.env.FAKE_DETECT_HANG === '1'
    ? 0
    : Number(process.env.FAKE_DETECT_HANG_FROM_BYTES ?? Number.POSITIVE_INFINITY);
const readRate = Number(process.env.FAKE_DETECT_READ_BYTES_PER_S ?? 0);
const answerDelayMs = Number(process.env.FAKE_DETECT_ANSWER_DELAY_MS ?? 0);
const status = Number(process.env.FAKE_DETECT_STATUS ?? 200);
const extraHeaders = JSON.parse(process.env.FAKE_DETECT_HEADERS ?? '{}');

const server = createServer((req, res) => {
  if (req.url === '/internal/ready') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"code":0,"data":{"status":"ready"}}');
    return;
  }
  let bytes = 0;
  req.on('data', (chunk) => {
    if (bytes === 0) console.log(JSON.stringify({ msg: 'reading', url: req.url }));
    bytes += chunk.length;
    if (readRate > 0) {
      // Backpressure: stop reading for as long as this chunk takes at the given rate.
      req.pause();
      setTimeout(() => req.resume(), (chunk.length / readRate) * 1000);
    }
  });
  req.on('end', () => {
    console.log(JSON.stringify({ msg: 'received', bytes, url: req.url }));
    if (bytes >= hangFrom) return;
    setTimeout(() => {
      res.writeHead(status, { 'content-type': 'application/json', ...extraHeaders });
      res.end(
        status === 503
          ? JSON.stringify({
              code: 5001,
              message: 'Service temporarily unavailable; treat as unknown, not safe',
            })
          : JSON.stringify({ code: 0, data: { upstream: name, bytes } }),
      );
    }, answerDelayMs);
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ msg: 'listening', port: server.address().port }));
});
