// The ONNX model file the detect service runs: its row's file in models/ (model-catalogue.ts), checked against the sha256 recorded
// in models/checksums.json. Converting the nsfwjs weights is a build step (`npm run models`, also run
// by `npm install`); the server only loads its result and never converts, so a missing or stale file
// stops it with a message saying what to run.

import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MODELS, type ModelName } from '../../../lib/common/model-catalogue.ts';

export const MODELS_DIR = fileURLToPath(new URL('../../../models/', import.meta.url));

export class ModelFileError extends Error {
  override name = 'ModelFileError';
}

export interface ModelFileOptions {
  /** Directory holding <name>.onnx and checksums.json; default: the repository's models/. */
  dir?: string;
}

const fixFor = (name: ModelName): string => {
  const { command, how } = MODELS[name].build;
  return `run \`${command}\` to ${how}`;
};

async function recordedSha256(name: ModelName, dir: string): Promise<string> {
  const fix = fixFor(name);
  const file = join(dir, 'checksums.json');
  let parsed: { models?: Partial<Record<ModelName, { sha256?: string }>> };
  try {
    parsed = JSON.parse(await readFile(file, 'utf8'));
  } catch (err) {
    throw new ModelFileError(`Cannot read ${file} (${(err as Error).message}); ${fix}`);
  }
  const sha256 = parsed.models?.[name]?.sha256;
  if (!sha256) throw new ModelFileError(`${file} records no checksum for ${name}; ${fix}`);
  return sha256;
}

function sha256Of(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(file)
      .on('data', (chunk) => hash.update(chunk))
      .on('end', () => resolve(hash.digest('hex')))
      .on('error', reject);
  });
}

const verified = new Map<string, Promise<string>>();

/**
 * Path of the model file once its sha256 matches checksums.json; rejects with a ModelFileError naming
 * the fix otherwise. Verified once per file and process (every scoring worker is its own process-wide
 * module instance, so each checks once).
 */
export function verifiedModelFile(name: ModelName, opts: ModelFileOptions = {}): Promise<string> {
  const dir = opts.dir ?? MODELS_DIR;
  const file = join(dir, MODELS[name].file);
  let pending = verified.get(file);
  if (!pending) {
    pending = (async () => {
      const fix = fixFor(name);
      const expected = await recordedSha256(name, dir);
      let actual: string;
      try {
        actual = await sha256Of(file);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new ModelFileError(
          code === 'ENOENT'
            ? `Model file ${file} is missing; ${fix}`
            : `Cannot read model file ${file} (${(err as Error).message}); ${fix}`,
        );
      }
      if (actual !== expected) {
        throw new ModelFileError(
          `Model file ${file} has sha256 ${actual}, but checksums.json records ${expected}; ${fix}`,
        );
      }
      return file;
    })();
    verified.set(file, pending);
    pending.catch(() => verified.delete(file));
  }
  return pending;
}
