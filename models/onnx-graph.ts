// Builds an ONNX ModelProto (onnx/onnx.proto, IR 7 / opset 13) with the protobuf writer.
// Only what the converter uses: float32/int64/uint8/uint16 initializers stored as raw_data,
// int/float/ints attributes, tensor inputs/outputs with static or symbolic dimensions.

import { endianness } from 'node:os';
import { ProtoWriter } from './protobuf.ts';

export const IR_VERSION = 7;
export const OPSET = 13;

const DATA_TYPE_FLOAT = 1;
const DATA_TYPE_UINT8 = 2;
const DATA_TYPE_UINT16 = 4;
const DATA_TYPE_INT64 = 7;
const ATTR_FLOAT = 1;
const ATTR_INT = 2;
const ATTR_INTS = 7;

export type Attribute =
  | { name: string; type: 'int'; value: number }
  | { name: string; type: 'float'; value: number }
  | { name: string; type: 'ints'; value: readonly number[] };

export const intAttr = (name: string, value: number): Attribute => ({ name, type: 'int', value });
export const floatAttr = (name: string, value: number): Attribute => ({ name, type: 'float', value });
export const intsAttr = (name: string, value: readonly number[]): Attribute => ({
  name,
  type: 'ints',
  value,
});

export interface OnnxNode {
  name: string;
  opType: string;
  inputs: readonly string[];
  outputs: readonly string[];
  attributes?: readonly Attribute[];
}

export interface Initializer {
  name: string;
  dims: readonly number[];
  data: Float32Array | BigInt64Array | Uint8Array | Uint16Array;
}

/** A float32 graph input/output; a string dimension is symbolic (e.g. the batch size). */
export interface TensorInfo {
  name: string;
  shape: readonly (number | string)[];
}

export interface OnnxModel {
  graphName: string;
  producerName: string;
  producerVersion: string;
  docString: string;
  metadata: Readonly<Record<string, string>>;
  nodes: readonly OnnxNode[];
  initializers: readonly Initializer[];
  inputs: readonly TensorInfo[];
  outputs: readonly TensorInfo[];
}

function encodeAttribute(a: Attribute): ProtoWriter {
  const w = new ProtoWriter().string(1, a.name);
  switch (a.type) {
    case 'float':
      return w.float(2, a.value).int(20, ATTR_FLOAT);
    case 'int':
      return w.int(3, a.value).int(20, ATTR_INT);
    case 'ints':
      return w.packedInts(8, a.value).int(20, ATTR_INTS);
  }
}

function encodeNode(n: OnnxNode): ProtoWriter {
  const w = new ProtoWriter();
  for (const i of n.inputs) w.string(1, i);
  for (const o of n.outputs) w.string(2, o);
  w.string(3, n.name).string(4, n.opType);
  for (const a of n.attributes ?? []) w.message(5, encodeAttribute(a));
  return w;
}

function encodeInitializer(t: Initializer): ProtoWriter {
  const count = t.dims.reduce((a, b) => a * b, 1);
  if (count !== t.data.length) {
    throw new Error(`initializer ${t.name}: dims ${t.dims.join('x')} do not match ${t.data.length} values`);
  }
  // raw_data is little-endian; a typed array's bytes are in host order.
  if (endianness() !== 'LE') throw new Error('the ONNX writer needs a little-endian host');
  const raw = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const dataType =
    t.data instanceof Float32Array
      ? DATA_TYPE_FLOAT
      : t.data instanceof BigInt64Array
        ? DATA_TYPE_INT64
        : t.data instanceof Uint16Array
          ? DATA_TYPE_UINT16
          : DATA_TYPE_UINT8;
  return new ProtoWriter().packedInts(1, t.dims).int(2, dataType).string(8, t.name).bytes(9, raw);
}

function encodeValueInfo(v: TensorInfo): ProtoWriter {
  const shape = new ProtoWriter();
  for (const d of v.shape) {
    const dim = new ProtoWriter();
    if (typeof d === 'number') dim.int(1, d);
    else dim.string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new ProtoWriter().int(1, DATA_TYPE_FLOAT).message(2, shape);
  const type = new ProtoWriter().message(1, tensorType);
  return new ProtoWriter().string(1, v.name).message(2, type);
}

export function serializeModel(m: OnnxModel): Uint8Array {
  const graph = new ProtoWriter();
  for (const n of m.nodes) graph.message(1, encodeNode(n));
  graph.string(2, m.graphName);
  for (const t of m.initializers) graph.message(5, encodeInitializer(t));
  for (const i of m.inputs) graph.message(11, encodeValueInfo(i));
  for (const o of m.outputs) graph.message(12, encodeValueInfo(o));

  const model = new ProtoWriter()
    .int(1, IR_VERSION)
    .string(2, m.producerName)
    .string(3, m.producerVersion)
    .string(6, m.docString)
    .message(7, graph)
    .message(8, new ProtoWriter().string(1, '').int(2, OPSET));
  for (const key of Object.keys(m.metadata).sort()) {
    model.message(14, new ProtoWriter().string(1, key).string(2, m.metadata[key] ?? ''));
  }
  return model.finish();
}
