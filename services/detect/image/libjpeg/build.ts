// `npm run build:native` (also run by `npm install`): compiles jpeg-tensor.c (the binding),
// jpeg-decode.c (the decoder) and pdq-downsample.c (PDQ's filter) against the system's libjpeg-turbo into build/jpeg-tensor.node (linked to libjpeg.so.62: Debian's libjpeg.a is not
// position-independent). Needs a C compiler and libjpeg-turbo's headers: `apt-get install gcc libc6-dev
// libjpeg62-turbo-dev` (Debian), which .ci/install-tools.sh and the Dockerfile install.
//
// Without them the service still runs, decoding every JPEG with sharp (slower; the log says so at boot):
// by default this prints why and exits 0; with --required or CI=true (CI, the image build) it fails.
// Rebuilds only when a source is newer than the addon.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
// The decoder and the filter have no Node-API: the libFuzzer target (test/fuzz) compiles them too.
const SOURCES = [join(HERE, 'jpeg-tensor.c'), join(HERE, 'jpeg-decode.c'), join(HERE, 'pdq-downsample.c')];
const HEADERS = [join(HERE, 'jpeg-decode.h'), join(HERE, 'pdq-downsample.h')];
export const ADDON = join(HERE, 'build', 'jpeg-tensor.node');
const INSTALL = 'apt-get install gcc libc6-dev libjpeg62-turbo-dev';

// CI installs the compiler and headers (.ci/install-tools.sh): there a missing addon is a failure.
const required = process.argv.includes('--required') || process.env.CI === 'true';

function fail(why: string): never {
  const message = `jpeg-tensor: not built (${why}). JPEGs will be decoded by sharp only. Install: ${INSTALL}`;
  if (required) {
    console.error(message);
    process.exit(1);
  }
  console.warn(message);
  process.exit(0);
}

const newest = Math.max(...[...SOURCES, ...HEADERS].map((file) => statSync(file).mtimeMs));
if (existsSync(ADDON) && statSync(ADDON).mtimeMs >= newest) process.exit(0);

let headers: string;
try {
  headers = createRequire(import.meta.url)('node-api-headers').include_dir as string;
} catch {
  fail('the node-api-headers package is not installed (a dev dependency)');
}

const cc = process.env.CC ?? 'cc';
mkdirSync(dirname(ADDON), { recursive: true });
const partial = `${ADDON}.${process.pid}.tmp`;
try {
  execFileSync(
    cc,
    [
      // -O3 vectorises PDQ's filter (2.8 -> 2.5 ms a 1 MP frame here); no optimisation level changes a
      // float result without -ffast-math or contraction, which stay off.
      '-O3',
      '-std=c11',
      '-D_DEFAULT_SOURCE',
      '-fPIC',
      '-shared',
      // The resize must round exactly as JavaScript does: no fused multiply-adds, no fast-math.
      '-ffp-contract=off',
      '-fvisibility=hidden',
      '-Wall',
      '-Wextra',
      '-Werror',
      `-I${headers}`,
      ...SOURCES,
      '-o',
      partial,
      '-ljpeg',
      '-lm',
    ],
    { stdio: ['ignore', 'inherit', 'pipe'] },
  );
} catch (err) {
  const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
  const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
  fail(missing ? `no C compiler (${cc})` : (stderr?.split('\n').slice(0, 3).join(' ') ?? String(err)));
}
renameSync(partial, ADDON);
console.log(`jpeg-tensor: built ${ADDON}`);
