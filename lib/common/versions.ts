// The service's name and version: what health reports (spec 2.3 and part 9) and the published contract states.

import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

export const SERVICE_NAME = 'nsfwdetector';
export const SERVICE_VERSION: string = pkg.version;
