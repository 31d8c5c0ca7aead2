// What dist/ is built from, as one hash: `npm start` rebuilds dist/ when it differs from the hash the
// build recorded, so an edited checkout never runs stale JavaScript. Every file under services/, lib/,
// tools/build/ and models/ counts but the tests (TypeScript is compiled, the rest copied: console pages, the JPEG addon),
// with the compiler settings and package.json; the converted models by name, size and mtime (hashing
// ~100 MB at every start would cost more than the check saves).

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const INPUTS = [
  'services',
  'lib',
  'tools/build',
  'models',
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
];

function* files(path: string): Generator<string> {
  if (!statSync(path).isDirectory()) {
    yield path;
    return;
  }
  for (const name of readdirSync(path).sort()) yield* files(join(path, name));
}

export function sourceHash(root: string): string {
  const hash = createHash('sha256');
  for (const input of INPUTS)
    for (const path of files(join(root, input))) {
      if (path.endsWith('.test.ts')) continue;
      hash.update(`${relative(root, path)}\0`);
      if (path.endsWith('.onnx')) {
        const { size, mtimeMs } = statSync(path);
        hash.update(`${size} ${mtimeMs}\0`);
      } else hash.update(readFileSync(path));
    }
  return hash.digest('hex');
}
