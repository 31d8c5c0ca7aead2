// The checked-in filter is what its source compiles to (the source is the one place for the fact;
// the binary the chart ships is generated from it): `npm run build:edge-filter` after a change.

import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { CLANG, describeWithTool, WASM_LD } from '../../test/support/tools.ts';
import { FILTER_WASM, freshFilter } from './build.ts';

describeWithTool([CLANG, WASM_LD], 'the edge filter binary', () => {
  it('is what source-connection-limit.c compiles to (npm run build:edge-filter)', () => {
    const fresh = freshFilter();
    expect(
      fresh.equals(readFileSync(FILTER_WASM)),
      `${FILTER_WASM} is stale: npm run build:edge-filter`,
    ).toBe(true);
  });

  it('is a proxy-wasm 0.2.1 module with the network callbacks and no other imports than the ABI', () => {
    const module = new WebAssembly.Module(readFileSync(FILTER_WASM));
    const exports = WebAssembly.Module.exports(module).map((e) => e.name);
    for (const name of [
      'memory',
      'proxy_abi_version_0_2_1',
      'proxy_on_memory_allocate',
      'proxy_on_configure',
      'proxy_on_new_connection',
      'proxy_on_downstream_connection_close',
      'proxy_on_done',
      'proxy_on_delete',
    ])
      expect(exports).toContain(name);
    for (const i of WebAssembly.Module.imports(module)) {
      expect(i.module).toBe('env');
      expect(i.name).toMatch(/^proxy_/);
    }
  });
});
