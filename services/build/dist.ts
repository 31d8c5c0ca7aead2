// `npm run build`: compiles the services to dist/ (tsconfig.build.json; `.ts` import specifiers become
// `.js`), then copies what they read at run time beside the compiled files, at the same relative paths:
// the non-TypeScript files under services/ (console pages, skill files), package.json (versions.ts),
// and the converted models with their checksums when present (models/*.onnx, models/checksums.json).

import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DIST = join(ROOT, 'dist');

rmSync(DIST, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json')],
  {
    stdio: 'inherit',
  },
);

function* files(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else yield path;
  }
}

const copy = (path: string) => {
  const target = join(DIST, relative(ROOT, path));
  mkdirSync(dirname(target), { recursive: true });
  cpSync(path, target);
};

let copied = 0;
for (const path of files(join(ROOT, 'services'))) {
  if (path.endsWith('.ts') || path.endsWith('/Dockerfile')) continue;
  copy(path);
  copied++;
}
copy(join(ROOT, 'package.json'));
for (const name of readdirSync(join(ROOT, 'models'))) {
  if (name.endsWith('.onnx') || name === 'checksums.json') {
    copy(join(ROOT, 'models', name));
    copied++;
  }
}
if (!existsSync(join(DIST, 'services/detect/server.js')))
  throw new Error('dist has no services/detect/server.js');
console.log(`build: dist/ compiled, ${copied} assets copied`);
