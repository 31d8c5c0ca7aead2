// Runs the JPEG fast path in a process of its own, so that a decode that never returns stops this
// process, not the test (fast-path-runner.ts kills it). argv: <model input size> <max pixels> <list>,
// where the list file holds one JPEG path a line. Each file is decoded without PDQ, then with PDQ's filter
// once for each reduce side of PDQ_SIDES. stdout: one JSON line for each, in order:
// { declined } or { width, height, sha256 } of the tensor's bytes, with { withPdq: for each side, the
// sha256 of the tensor and of the 64×64 downsample, or why only that decode declined }.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { jpegToTensor } from '../../services/detect/image/libjpeg/jpeg-tensor.ts';
import { PDQ_SIDES } from './fast-path-runner.ts';

const size = Number(process.argv[2]);
const maxPixels = Number(process.argv[3]);
const paths = readFileSync(process.argv[4] ?? '', 'utf8')
  .split('\n')
  .filter(Boolean);

const sha256 = (t: Float32Array) =>
  createHash('sha256')
    .update(new Uint8Array(t.buffer, t.byteOffset, t.byteLength))
    .digest('hex');

for (const path of paths) {
  const bytes = readFileSync(path);
  const result = jpegToTensor(bytes, size, maxPixels);
  const withPdq = () =>
    PDQ_SIDES.map((side) => {
      const hashed = jpegToTensor(bytes, size, maxPixels, side);
      return typeof hashed === 'string'
        ? { side, declined: hashed }
        : { side, sha256: sha256(hashed.tensor), pdq: hashed.pdq ? sha256(hashed.pdq) : 'none' };
    });
  const line =
    typeof result === 'string'
      ? { declined: result }
      : { width: result.width, height: result.height, sha256: sha256(result.tensor), withPdq: withPdq() };
  process.stdout.write(`${JSON.stringify(line)}\n`);
}
