// `npm run build:edge-filter`: compiles the edge's per-source connection bound
// (source-connection-limit.c, an Envoy network filter, docs/edge.md) to WebAssembly, into the chart
// (charts/nsfwdetector/files/source-connection-limit.wasm), where the gateway's ConfigMap and
// `npm run stack` load it from. The binary is checked in and generated: build.test.ts rebuilds it and
// compares the bytes. `--check`: only compare, exit 1 when the checked-in binary is stale.
//
// Needs clang and wasm-ld (Debian: `apt-get install clang lld`, .ci/install-tools.sh), the versions
// Debian 12 ships (14.0.6): another compiler may emit other, equally valid, bytes. No libc, no debug
// information, no custom sections: the output depends on the source and the compiler only.

import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const FILTER_SOURCE = fileURLToPath(new URL('./source-connection-limit.c', import.meta.url));
/** The built filter, as the chart ships it. */
export const FILTER_WASM = fileURLToPath(
  new URL('../../charts/nsfwdetector/files/source-connection-limit.wasm', import.meta.url),
);

/** Compiles the filter to `out`. */
export function buildFilter(out: string, clang = process.env.CLANG ?? 'clang'): void {
  execFileSync(
    clang,
    [
      '--target=wasm32',
      '-O2',
      '-std=c11',
      '-Wall',
      '-Wextra',
      '-Werror',
      '-nostdlib',
      '-ffreestanding',
      '-fno-builtin',
      // Only the exports the source names (proxy_*, memory); no start function.
      '-Wl,--no-entry',
      '-Wl,--strip-all',
      '-o',
      out,
      FILTER_SOURCE,
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  // A module, not a program (the linker marks its output executable).
  chmodSync(out, 0o644);
}

/** The bytes the source compiles to here. */
export function freshFilter(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'source-connection-limit-'));
  try {
    const out = join(dir, 'filter.wasm');
    buildFilter(out);
    return readFileSync(out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--check')) {
    if (!freshFilter().equals(readFileSync(FILTER_WASM))) {
      console.error(`${FILTER_WASM} is stale: run npm run build:edge-filter`);
      process.exit(1);
    }
  } else {
    buildFilter(FILTER_WASM);
    console.log(`wrote ${FILTER_WASM}`);
  }
}
