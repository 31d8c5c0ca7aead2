// Runs the JPEG fast path in a process of its own, so that a decode that never returns stops this
// process, not the test (fast-path-runner.ts kills it). argv: <model input size> <max pixels> <list>,
// where the list file holds one JPEG path a line. stdout: one JSON line for each, in order: { declined }
// or { width, height, sha256 } of the tensor's bytes.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { jpegToTensor } from '../../services/detect/image/libjpeg/jpeg-tensor.ts';

const size = Number(process.argv[2]);
const maxPixels = Number(process.argv[3]);
const paths = readFileSync(process.argv[4] ?? '', 'utf8')
  .split('\n')
  .filter(Boolean);

for (const path of paths) {
  const result = jpegToTensor(readFileSync(path), size, maxPixels);
  const line =
    typeof result === 'string'
      ? { declined: result }
      : {
          width: result.width,
          height: result.height,
          sha256: createHash('sha256')
            .update(new Uint8Array(result.tensor.buffer, result.tensor.byteOffset, result.tensor.byteLength))
            .digest('hex'),
        };
  process.stdout.write(`${JSON.stringify(line)}\n`);
}
