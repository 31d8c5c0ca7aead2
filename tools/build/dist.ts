// `npm run build`: compiles the services and lib/ to dist/ (tsconfig.build.json; `.ts` import specifiers
// become `.js`), then copies what they read at run time beside the compiled files, at the same relative
// paths: the non-TypeScript files under services/ and lib/ (console pages, skill files, the JPEG addon),
// package.json (versions.ts), and the converted models with their checksums when present (models/*.onnx,
// models/checksums.json, open_nsfw's licences). The published contract is generated from the routes
// into dist/services/health/openapi.json (generate-openapi.ts, through tsx), so the image serves what its
// routes produce. `--if-stale` (npm ci and npm start) builds only when the sources differ from the ones
// dist/ was built from (sources.ts).
//
// Runs on node's own type stripping, not tsx: the check precedes every `npm start`, and nothing of tsx
// or esbuild is left running after it (the document's generator, a build step, runs under tsx and exits). The build goes to a directory of its own and replaces dist/
// whole, so two starts racing never run a half-written dist/.

import { execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sourceHash } from './sources.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DIST = join(ROOT, 'dist');
const STAMP = 'source-hash';

const hash = sourceHash(ROOT);
const builtFrom = (): string | undefined => {
  try {
    return readFileSync(join(DIST, STAMP), 'utf8');
  } catch {
    return undefined;
  }
};
if (process.argv.includes('--if-stale') && builtFrom() === hash) process.exit(0);

const next = join(ROOT, `.dist-${process.pid}`);
rmSync(next, { recursive: true, force: true });
try {
  execFileSync(
    process.execPath,
    [
      join(ROOT, 'node_modules/typescript/bin/tsc'),
      '-p',
      join(ROOT, 'tsconfig.build.json'),
      '--outDir',
      next,
    ],
    { stdio: 'inherit' },
  );

  function* files(dir: string): Generator<string> {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) yield* files(path);
      else yield path;
    }
  }

  const copy = (path: string) => {
    const target = join(next, relative(ROOT, path));
    mkdirSync(dirname(target), { recursive: true });
    cpSync(path, target, { recursive: true });
  };

  let copied = 0;
  for (const path of [...files(join(ROOT, 'services')), ...files(join(ROOT, 'lib'))]) {
    if (path.endsWith('.ts') || path.endsWith('/Dockerfile')) continue;
    copy(path);
    copied++;
  }
  copy(join(ROOT, 'package.json'));
  for (const name of readdirSync(join(ROOT, 'models'))) {
    // open_nsfw's licence files travel with it (models/open-nsfw.ts).
    if (name.endsWith('.onnx') || name === 'checksums.json' || name === 'open_nsfw-licenses') {
      copy(join(ROOT, 'models', name));
      copied++;
    }
  }
  execFileSync(
    process.execPath,
    [
      '--import',
      'tsx',
      join(ROOT, 'tools/build/generate-openapi.ts'),
      '--out',
      join(next, 'services/health/openapi.json'),
    ],
    { cwd: ROOT, stdio: 'inherit' },
  );
  if (!existsSync(join(next, 'services/detect/server.js')))
    throw new Error('the build has no services/detect/server.js');
  writeFileSync(join(next, STAMP), hash);
  rmSync(DIST, { recursive: true, force: true });
  try {
    renameSync(next, DIST);
  } catch (err) {
    // Another build of the same sources got there first: its dist/ is as good as this one.
    if (builtFrom() !== hash) throw err;
  }
  console.log(`build: dist/ compiled, ${copied} assets copied`);
} finally {
  rmSync(next, { recursive: true, force: true });
}
