// `npm run openapi`: writes the published contract generated from the routes
// (services/health/openapi.json, which the health service serves). `--out <file>` writes it there
// instead (the dist build: tools/build/dist.ts). `--check` writes nothing and exits 1 when the file is
// not the document the routes produce (tools/build/openapi-document.test.ts checks it in CI).

import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildPublicDocument, DOCUMENT_PATH, documentIsCurrent, documentText } from './openapi-document.ts';

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { values } = parseArgs({ options: { check: { type: 'boolean' }, out: { type: 'string' } } });
  if (values.check) {
    if (!(await documentIsCurrent())) {
      console.error(
        'services/health/openapi.json is not the document the routes produce. Run npm run openapi (and edit the routes, not this file).',
      );
      process.exit(1);
    }
  } else writeFileSync(values.out ?? DOCUMENT_PATH, documentText(await buildPublicDocument()));
}
