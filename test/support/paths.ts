// Paths outside the repository that tests read: the shared spec.

import { fileURLToPath } from 'node:url';

export const SHARED_DIR = fileURLToPath(new URL('../../../shared/', import.meta.url));
export const SPEC_PATH = `${SHARED_DIR}spec/SPEC.md`;
