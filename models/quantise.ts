// Builds the reduced-precision variant of MobileNetV2 (models/mobilenet_v2_int8.onnx) from the float
// model with onnxruntime's quantisation tools (models/quantise.py, in the venv .ci/install-tools.sh
// builds), and checks it against the sha256 recorded in models/checksums.json, as convert.ts does for
// the float models. Opt-in: `npm install` does not build it.
//
//   npx tsx models/quantise.ts [--if-missing] [--update-checksums]
//   npx tsx models/quantise.ts --variant <name> --out-dir <dir>   (the other variants, for comparison)
//
// Calibration (static quantisation) runs on CALIBRATION_IMAGES only, decoded and resized by the
// server's own pipeline; fidelity is measured on the other corpus images (evaluationImages()).

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs as parseArgv, promisify } from 'node:util';
import { MODELS, type ModelName } from '../lib/common/model-catalogue.ts';
import { toModelInput } from '../services/detect/image/decode.ts';
import { probeHeader } from '../services/detect/image/probe.ts';
import { sniffFormat } from '../services/detect/image/sniff.ts';
import { CORPUS, fixture } from '../test/fixtures/corpus.ts';
import { TOOLS_DIR } from '../tools/stack/tools.ts';
import {
  BUILD_FLAGS,
  buildOptions,
  CHECKSUMS_FILE,
  convertToBytes,
  MODELS_DIR,
  readChecksums,
  writeChecksums,
} from './convert.ts';

/** Keep in step with .ci/install-tools.sh (the venv's name carries the version). */
export const ORT_QUANTISATION_VERSION = '1.30.0';
export const QUANTISE_VENV = path.join(TOOLS_DIR, `quantise-ort-${ORT_QUANTISATION_VERSION}`);
export const QUANTISE_PYTHON = path.join(QUANTISE_VENV, 'bin', 'python');
export const QUANTISE_COMMAND = 'npm run models:int8';
const SCRIPT = fileURLToPath(new URL('quantise.py', import.meta.url));

/**
 * The quantisation recipes compared (docs/quantised-model.md); INT8_RECIPE builds mobilenet_v2_int8.
 * static: ranges calibrated on CALIBRATION_IMAGES (MinMax unless --calibrate); dynamic: activations
 * quantised per inference. qdq/qoperator: ORT's two graph formats. float-head/-stem: the dense head
 * (Gemm, Relu, Softmax) / the first Conv kept in float.
 */
export const VARIANTS = {
  'static-qdq-per-channel': ['--method', 'static', '--format', 'qdq', '--per-channel'],
  'static-qdq': ['--method', 'static', '--format', 'qdq'],
  'static-qoperator-per-channel': ['--method', 'static', '--format', 'qoperator', '--per-channel'],
  'static-qoperator': ['--method', 'static', '--format', 'qoperator'],
  'dynamic-per-channel': ['--method', 'dynamic', '--per-channel'],
  dynamic: ['--method', 'dynamic'],
  'static-qdq-per-channel-float-head': [
    '--method',
    'static',
    '--format',
    'qdq',
    '--per-channel',
    '--float-head',
  ],
  'static-qoperator-per-channel-float-head': [
    '--method',
    'static',
    '--format',
    'qoperator',
    '--per-channel',
    '--float-head',
  ],
  'static-qoperator-per-channel-float-ends': [
    '--method',
    'static',
    '--format',
    'qoperator',
    '--per-channel',
    '--float-head',
    '--float-stem',
  ],
  'static-qoperator-per-channel-percentile': [
    '--method',
    'static',
    '--format',
    'qoperator',
    '--per-channel',
    '--calibrate',
    'percentile',
  ],
  'static-qoperator-per-channel-percentile-float-ends': [
    '--method',
    'static',
    '--format',
    'qoperator',
    '--per-channel',
    '--calibrate',
    'percentile',
    '--float-head',
    '--float-stem',
  ],
} as const satisfies Record<string, readonly string[]>;
export type Variant = keyof typeof VARIANTS;
/** The best fidelity of the recipes measured (docs/quantised-model.md). */
export const INT8_RECIPE: Variant = 'static-qoperator-per-channel-percentile-float-ends';
export const INT8_MODEL = 'mobilenet_v2_int8' satisfies ModelName;

/**
 * The corpus images static quantisation calibrates on. Fidelity is measured on every other decodable
 * corpus image, so the figures are not flattered by images the ranges were fitted to. Near-duplicates
 * stay on one side: all eight Portrait_N (one photo, EXIF-rotated) are here, all Landscape_N are not.
 * Changing this list changes the model's bytes (update checksums.json).
 */
export const CALIBRATION_IMAGES = [
  'Portrait_1.jpg',
  'Portrait_2.jpg',
  'Portrait_3.jpg',
  'Portrait_4.jpg',
  'Portrait_5.jpg',
  'Portrait_6.jpg',
  'Portrait_7.jpg',
  'Portrait_8.jpg',
  '4.webp',
  'Crash_test.gif',
  'alpha-layer-2-ink.jpg',
  'booleanTest.jpg',
  'embedgravitybird.png',
  'gain-map.jpg',
  'gamma_dalai_lama_gray.jpg',
  'gradients-rgb8.png',
  'low-contrast.jpg',
  'random.jpg',
  'test-pattern.png',
  'testimgl.jpg',
  'cielab-dagams.tiff',
  'Channel_digital_image_CMYK_color.jpg',
  'stripesH.png',
  'Flag_of_the_Netherlands.png',
] as const;

/** Decodable corpus images not used for calibration: where fidelity is measured. */
export function evaluationImages(): string[] {
  const calibration = new Set<string>(CALIBRATION_IMAGES);
  return Object.entries(CORPUS)
    .filter(([name, outcome]) => 'ok' in outcome && !calibration.has(name))
    .map(([name]) => name);
}

/** The model input the server would score for a corpus image (sniff, probe, decode, nsfwjs resize). */
export async function corpusTensor(name: string, size = 224): Promise<Float32Array> {
  const bytes = await readFile(fixture(name));
  const probed = probeHeader(bytes, await sniffFormat(bytes));
  return (await toModelInput(bytes, probed, size)).tensor;
}

export const int8ModelFile = (dir = MODELS_DIR): string => path.join(dir, MODELS[INT8_MODEL].file);
const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

export class QuantiseToolMissingError extends Error {}

export interface QuantiseOptions {
  variant?: Variant;
  outDir?: string;
  ifMissing?: boolean;
  /** Record the produced hash in checksums.json instead of checking it (INT8_RECIPE only). */
  updateChecksums?: boolean;
  checksumsFile?: string;
}

export interface QuantiseResult {
  file: string;
  sha256: string;
  bytes: number;
  built: boolean;
  ms: number;
}

/** Builds a variant into <outDir>/mobilenet_v2_int8.onnx (INT8_RECIPE: checked against checksums.json). */
export async function quantiseModel(opts: QuantiseOptions = {}): Promise<QuantiseResult> {
  const started = performance.now();
  const variant = opts.variant ?? INT8_RECIPE;
  const file = int8ModelFile(opts.outDir);
  const checksumsFile = opts.checksumsFile ?? CHECKSUMS_FILE;
  const checksums = await readChecksums(checksumsFile);
  const recorded = checksums.models[INT8_MODEL]?.sha256;
  if (opts.ifMissing && existsSync(file)) {
    const existing = await readFile(file);
    if (sha256(existing) === recorded) {
      return {
        file,
        sha256: recorded,
        bytes: existing.length,
        built: false,
        ms: performance.now() - started,
      };
    }
  }
  if (!existsSync(QUANTISE_PYTHON)) {
    throw new QuantiseToolMissingError(
      `${QUANTISE_PYTHON} is missing: run bash .ci/install-tools.sh (onnxruntime ${ORT_QUANTISATION_VERSION} from PyPI, in its own venv)`,
    );
  }
  const work = await mkdtemp(path.join(tmpdir(), 'nsfwdetector-calibration-'));
  try {
    // The quantiser rewrites Conv and Gemm weights it finds as float initializers: the unpacked model.
    const floatModel = path.join(work, 'mobilenet_v2.float.onnx');
    await writeFile(floatModel, convertToBytes('mobilenet_v2', { packed: false }));
    // Calibration tensors named in list order, so the reader (which sorts by name) keeps that order.
    await Promise.all(
      CALIBRATION_IMAGES.map(async (name, i) => {
        const tensor = await corpusTensor(name);
        await writeFile(path.join(work, `${String(i).padStart(3, '0')}.f32`), new Uint8Array(tensor.buffer));
      }),
    );
    const tmpOut = path.join(work, 'out.onnx');
    await promisify(execFile)(QUANTISE_PYTHON, [SCRIPT, floatModel, work, tmpOut, ...VARIANTS[variant]], {
      maxBuffer: 16 * 1024 * 1024,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: '1', PYTHONHASHSEED: '0' },
    });
    const bytes = await readFile(tmpOut);
    const digest = sha256(bytes);
    if (variant === INT8_RECIPE) {
      if (opts.updateChecksums) {
        checksums.models[INT8_MODEL] = { sha256: digest, bytes: bytes.length };
        await writeChecksums(checksums, checksumsFile);
      } else if (digest !== recorded) {
        throw new Error(
          `${INT8_MODEL}.onnx: sha256 ${digest} does not match ${recorded ? `the recorded ${recorded}` : 'any recorded checksum'}. ` +
            `If the change is intended (new onnxruntime, calibration list), run: npx tsx models/quantise.ts --update-checksums`,
        );
      }
    }
    await mkdir(path.dirname(file), { recursive: true });
    await rename(tmpOut, file).catch(async () => {
      await writeFile(`${file}.tmp`, bytes);
      await rename(`${file}.tmp`, file);
    });
    return { file, sha256: digest, bytes: bytes.length, built: true, ms: performance.now() - started };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

let pending: Promise<string> | undefined;
/** Path of an up-to-date models/mobilenet_v2_int8.onnx, building it first when absent or stale. */
export function ensureInt8Model(): Promise<string> {
  pending ??= quantiseModel({ ifMissing: true }).then((r) => r.file);
  pending.catch(() => {
    pending = undefined;
  });
  return pending;
}

function parseArgs(argv: string[]): QuantiseOptions {
  const { values } = parseArgv({ args: argv, options: { ...BUILD_FLAGS, variant: { type: 'string' } } });
  const v = values.variant;
  if (v !== undefined && !Object.hasOwn(VARIANTS, v))
    throw new Error(`--variant must be one of ${Object.keys(VARIANTS).join(', ')}`);
  const opts: QuantiseOptions = {
    ...buildOptions(values),
    ...(v === undefined ? {} : { variant: v as Variant }),
  };
  if (opts.variant && opts.variant !== INT8_RECIPE && !opts.outDir) {
    throw new Error(
      `--variant ${opts.variant} is not INT8_RECIPE: give --out-dir (models/ holds ${INT8_RECIPE})`,
    );
  }
  return opts;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const r = await quantiseModel(opts);
  const what = r.built ? `built in ${(r.ms / 1000).toFixed(1)} s` : 'up to date';
  console.log(
    `${INT8_MODEL} (${opts.variant ?? INT8_RECIPE}): ${what} → ${path.relative(process.cwd(), r.file)} (${r.bytes} bytes, sha256 ${r.sha256})`,
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  });
}
