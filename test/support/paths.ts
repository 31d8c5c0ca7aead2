// Paths tests read: the repository's root, and the shared spec outside it.

import { fileURLToPath } from 'node:url';

/** The repository's root, with a trailing slash. */
export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const SHARED_DIR = fileURLToPath(new URL('../../../shared/', import.meta.url));
export const SPEC_PATH = `${SHARED_DIR}spec/SPEC.md`;
