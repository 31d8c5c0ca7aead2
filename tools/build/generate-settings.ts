// `npm run settings`: writes every file generated from the settings table (lib/common/settings.ts).
// `npm run settings -- --check` writes nothing and exits 1 naming the files that are not current
// (tools/build/settings-files.test.ts runs it in CI), so a hand edit of a generated file, or a table
// change without regenerating, fails the build.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GENERATED, type GeneratedFile, ROOT, renderAll, staleFiles } from './settings-files.ts';

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes('--check')) {
    const stale = staleFiles();
    if (stale.length > 0) {
      console.error(
        `Not current with lib/common/settings.ts: ${stale.map((f) => GENERATED[f]).join(', ')}. Run npm run settings (and edit the table, not these files).`,
      );
      process.exit(1);
    }
  } else {
    const files = renderAll();
    for (const key of Object.keys(GENERATED) as GeneratedFile[]) {
      const path = `${ROOT}${GENERATED[key]}`;
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, files[key]);
    }
  }
}
