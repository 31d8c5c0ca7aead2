// Reads the Keras-format models bundled in the nsfwjs package: the topology from
// dist/models/<name>/model.min.js and the quantized weights from group1-shard*.min.js (UMD bundles
// whose module.exports is the tfjs model.json object, resp. a base64 string). The package's
// `exports` map hides these files, so they are loaded by path.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { FloatModelName } from '../lib/common/model-catalogue.ts';

const require = createRequire(import.meta.url);

export interface KerasLayer {
  name: string;
  class_name: string;
  config: Record<string, unknown>;
  /** [[[layerName, nodeIndex, tensorIndex, kwargs], ...]] — one entry per call of the layer. */
  inbound_nodes: [string, number, number, unknown][][];
}

export interface Weight {
  shape: number[];
  values: Float32Array;
}

export interface KerasModel {
  name: FloatModelName;
  nsfwjsVersion: string;
  layers: KerasLayer[];
  inputLayers: string[];
  outputLayers: string[];
  weights: Map<string, Weight>;
}

interface WeightSpec {
  name: string;
  shape: number[];
  dtype: string;
  quantization?: { dtype: string; min?: number; scale?: number };
}

interface ModelJson {
  modelTopology: {
    model_config: {
      class_name: string;
      config: {
        layers: KerasLayer[];
        input_layers: [string, number, number][];
        output_layers: [string, number, number][];
      };
    };
  };
  weightsManifest: { paths: string[]; weights: WeightSpec[] }[];
}

/** nsfwjs's dist/ folder, found through the package's own entry point. */
export function nsfwjsDistDir(): string {
  // require.resolve('nsfwjs') → <pkg>/dist/cjs/index.js
  return path.resolve(path.dirname(require.resolve('nsfwjs')), '..');
}

export function nsfwjsVersion(): string {
  const pkg = JSON.parse(readFileSync(path.join(nsfwjsDistDir(), '..', 'package.json'), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/** Bytes per stored value, as tfjs's io.decodeWeights counts them. */
const STORED_BYTES: Record<string, number> = { uint8: 1, uint16: 2, float32: 4 };

/**
 * Dequantizes exactly as tfjs-core's io.decodeWeights: `q * scale + min` evaluated in double
 * precision, then rounded to float32 — so our constants are bit-identical to nsfwjs's.
 */
function decodeWeight(spec: WeightSpec, bytes: Uint8Array): Float32Array {
  if (spec.dtype !== 'float32') throw new Error(`weight ${spec.name}: unsupported dtype ${spec.dtype}`);
  const q = spec.quantization;
  if (!q) return new Float32Array(new Uint8Array(bytes).buffer);
  const { min, scale } = q;
  if ((q.dtype !== 'uint8' && q.dtype !== 'uint16') || min === undefined || scale === undefined) {
    throw new Error(`weight ${spec.name}: unsupported quantization ${JSON.stringify(q)}`);
  }
  const stored = q.dtype === 'uint8' ? bytes : new Uint16Array(new Uint8Array(bytes).buffer);
  const values = new Float32Array(stored.length);
  for (let i = 0; i < stored.length; i++) values[i] = (stored[i] as number) * scale + min;
  return values;
}

export function loadKerasModel(name: FloatModelName): KerasModel {
  const dir = path.join(nsfwjsDistDir(), 'models', name);
  const json = require(path.join(dir, 'model.min.js')) as ModelJson;
  const modelConfig = json.modelTopology.model_config;
  if (modelConfig.class_name !== 'Model') {
    throw new Error(`${name}: expected a functional Keras Model, got ${modelConfig.class_name}`);
  }

  const weights = new Map<string, Weight>();
  for (const group of json.weightsManifest) {
    // A group's shards are one byte stream; its weights lie in it back to back, in manifest order
    // (which is alphabetical, not layer order: they are looked up by name afterwards).
    const shards = group.paths.map((p) => {
      const base64 = require(path.join(dir, `${p}.min.js`)) as unknown;
      if (typeof base64 !== 'string') throw new Error(`${name}: shard ${p} is not a base64 string`);
      return Buffer.from(base64, 'base64');
    });
    const data = Buffer.concat(shards);
    let offset = 0;
    for (const spec of group.weights) {
      const count = spec.shape.reduce((a, b) => a * b, 1);
      const perValue = STORED_BYTES[spec.quantization?.dtype ?? spec.dtype];
      if (perValue === undefined) throw new Error(`weight ${spec.name}: unknown storage type`);
      const size = count * perValue;
      if (offset + size > data.length) throw new Error(`${name}: weight data ends inside ${spec.name}`);
      weights.set(spec.name, {
        shape: spec.shape,
        values: decodeWeight(spec, data.subarray(offset, offset + size)),
      });
      offset += size;
    }
    if (offset !== data.length) {
      throw new Error(`${name}: ${data.length - offset} unused bytes after the weights of ${group.paths[0]}`);
    }
  }

  return {
    name,
    nsfwjsVersion: nsfwjsVersion(),
    layers: modelConfig.config.layers,
    inputLayers: modelConfig.config.input_layers.map(([l]) => l),
    outputLayers: modelConfig.config.output_layers.map(([l]) => l),
    weights,
  };
}
