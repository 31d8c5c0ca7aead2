// Converts the NSFW classifiers bundled in the nsfwjs package into ONNX graphs (models/<name>.onnx)
// and checks each output against the sha256 recorded in models/checksums.json. Downloads nothing.
//
//   npx tsx models/convert.ts [--if-missing] [--model mobilenet_v2|inception_v3|all]
//                             [--out-dir <dir>] [--update-checksums]
//
// --if-missing        only convert models whose .onnx is absent or does not match its checksum
// --update-checksums  record the new hashes instead of checking them (after upgrading nsfwjs)
//
// The services never convert: they load the checksummed file (services/detect/model/model-file.ts).
// ensureModel(name) does what --if-missing does for one model, for tests and tools.

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs as parseArgv } from 'node:util';
import {
  FLOAT_MODEL_NAMES,
  type FloatModelName,
  MODEL_NAMES,
  MODELS,
  type ModelName,
} from '../lib/common/model-catalogue.ts';
import { kerasToOnnx } from './keras-to-onnx.ts';
import { loadKerasModel, nsfwjsVersion } from './keras-weights.ts';
import { serializeModel } from './onnx-graph.ts';
import { packWeights } from './pack-weights.ts';

export const MODELS_DIR = path.dirname(fileURLToPath(import.meta.url));
export const CHECKSUMS_FILE = path.join(MODELS_DIR, 'checksums.json');

export interface Checksums {
  /** The nsfwjs version the hashes were produced from. */
  nsfwjs: string;
  models: Partial<Record<ModelName, { sha256: string; bytes: number }>>;
}

export const modelFile = (name: FloatModelName, dir = MODELS_DIR): string =>
  path.join(dir, MODELS[name].file);

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

export async function readChecksums(file = CHECKSUMS_FILE): Promise<Checksums> {
  if (!existsSync(file)) return { nsfwjs: nsfwjsVersion(), models: {} };
  return JSON.parse(await readFile(file, 'utf8')) as Checksums;
}

export async function writeChecksums(checksums: Checksums, file = CHECKSUMS_FILE): Promise<void> {
  const sorted: Checksums = { nsfwjs: checksums.nsfwjs, models: {} };
  for (const name of MODEL_NAMES) {
    const entry = checksums.models[name];
    if (entry) sorted.models[name] = entry;
  }
  await writeFile(file, `${JSON.stringify(sorted, null, 2)}\n`);
}

/**
 * Builds the ONNX bytes in memory. Pure: the same nsfwjs files give the same bytes. Packed (the
 * default, what models/<name>.onnx holds): the quantised weights at a quarter of their float32 size,
 * unpacked by onnxruntime at load into the same float32 tensors (models/pack-weights.ts). Unpacked:
 * plain float32 initializers, for tools that rewrite weights (the int8 quantisation).
 */
export function convertToBytes(name: FloatModelName, opts: { packed?: boolean } = {}): Uint8Array {
  const graph = kerasToOnnx(loadKerasModel(name));
  return serializeModel(opts.packed === false ? graph : packWeights(graph));
}

export class ChecksumMismatchError extends Error {}

function verify(name: FloatModelName, digest: string, checksums: Checksums): void {
  const expected = checksums.models[name]?.sha256;
  if (expected === digest) return;
  const installed = nsfwjsVersion();
  const hint =
    installed !== checksums.nsfwjs
      ? `nsfwjs is ${installed} but checksums.json was recorded with ${checksums.nsfwjs}. `
      : '';
  throw new ChecksumMismatchError(
    `${name}.onnx: sha256 ${digest} does not match ${expected ? `the recorded ${expected}` : 'any recorded checksum'}. ` +
      `${hint}If the change is intended, run: npx tsx models/convert.ts --model ${name} --update-checksums`,
  );
}

/** Writes via a temporary file and a rename, so readers never see a partial model. */
async function writeAtomically(file: string, bytes: Uint8Array): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  try {
    await writeFile(tmp, bytes);
    await rename(tmp, file);
  } finally {
    await rm(tmp, { force: true });
  }
}

export interface ConvertResult {
  name: FloatModelName;
  file: string;
  sha256: string;
  bytes: number;
  /** Whether the file was (re)written; false when an up-to-date file was kept. */
  converted: boolean;
  ms: number;
}

export interface ConvertOptions {
  outDir?: string;
  ifMissing?: boolean;
  /** Record the produced hash in checksums.json instead of checking it. */
  updateChecksums?: boolean;
  checksumsFile?: string;
}

export async function convertModel(name: FloatModelName, opts: ConvertOptions = {}): Promise<ConvertResult> {
  const started = performance.now();
  const file = modelFile(name, opts.outDir);
  const checksumsFile = opts.checksumsFile ?? CHECKSUMS_FILE;
  const checksums = await readChecksums(checksumsFile);

  if (opts.ifMissing && !opts.updateChecksums && existsSync(file)) {
    const existing = await readFile(file);
    const digest = sha256(existing);
    if (digest === checksums.models[name]?.sha256) {
      return {
        name,
        file,
        sha256: digest,
        bytes: existing.length,
        converted: false,
        ms: performance.now() - started,
      };
    }
  }

  const bytes = convertToBytes(name);
  const digest = sha256(bytes);
  if (opts.updateChecksums) {
    checksums.nsfwjs = nsfwjsVersion();
    checksums.models[name] = { sha256: digest, bytes: bytes.length };
    await writeChecksums(checksums, checksumsFile);
  } else {
    verify(name, digest, checksums);
  }
  await writeAtomically(file, bytes);
  return {
    name,
    file,
    sha256: digest,
    bytes: bytes.length,
    converted: true,
    ms: performance.now() - started,
  };
}

const pending = new Map<string, Promise<string>>();

/**
 * Path of an up-to-date ONNX model, converting it first when the file is absent or its sha256 does
 * not match checksums.json. Concurrent calls share one conversion.
 */
export function ensureModel(name: FloatModelName, opts: { dir?: string } = {}): Promise<string> {
  const file = modelFile(name, opts.dir);
  let p = pending.get(file);
  if (!p) {
    p = convertModel(name, { outDir: opts.dir, ifMissing: true }).then((r) => r.file);
    pending.set(file, p);
    p.catch(() => pending.delete(file));
  }
  return p;
}

/** The flags every model-building command takes (convert, quantise), for node:util parseArgs. */
export const BUILD_FLAGS = {
  'if-missing': { type: 'boolean' },
  'update-checksums': { type: 'boolean' },
  'out-dir': { type: 'string' },
} as const;

/** The options those flags set. */
export function buildOptions(values: {
  'if-missing'?: boolean;
  'update-checksums'?: boolean;
  'out-dir'?: string;
}): Pick<ConvertOptions, 'ifMissing' | 'updateChecksums' | 'outDir'> {
  return {
    ...(values['if-missing'] ? { ifMissing: true } : {}),
    ...(values['update-checksums'] ? { updateChecksums: true } : {}),
    ...(values['out-dir'] === undefined ? {} : { outDir: path.resolve(values['out-dir']) }),
  };
}

function parseArgs(argv: string[]): ConvertOptions & { models: FloatModelName[] } {
  const { values } = parseArgv({ args: argv, options: { ...BUILD_FLAGS, model: { type: 'string' } } });
  const m = values.model ?? 'all';
  if (m !== 'all' && !(FLOAT_MODEL_NAMES as readonly string[]).includes(m))
    throw new Error(`--model must be one of ${FLOAT_MODEL_NAMES.join(', ')}, all (got ${m})`);
  return { models: m === 'all' ? [...FLOAT_MODEL_NAMES] : [m as FloatModelName], ...buildOptions(values) };
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  for (const name of opts.models) {
    const r = await convertModel(name, opts);
    const what = r.converted ? `converted in ${(r.ms / 1000).toFixed(2)} s` : 'up to date';
    console.log(
      `${name}: ${what} → ${path.relative(process.cwd(), r.file)} (${r.bytes} bytes, sha256 ${r.sha256})`,
    );
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
