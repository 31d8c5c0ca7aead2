// The published contract of the whole service, detect's routes included, for the cluster's health
// service, which holds none of them: generated from the routes at build time (tools/build/
// openapi-document.ts) into openapi.json beside this file.

import { readFileSync } from 'node:fs';

export function readPublicDocument(): object {
  return JSON.parse(readFileSync(new URL('./openapi.json', import.meta.url), 'utf8')) as object;
}
