// Lossless weight packing for the converted models. nsfwjs ships its weights quantised (uint8 per
// tensor, dequantised by tfjs), so each large float tensor holds at most 256 distinct values: stored
// as float32 they take four times the bytes they carry. A packed tensor is its distinct values (the
// palette, float32, bit patterns kept exactly) and one uint8 (or uint16) index per element; two nodes,
// Cast and Gather, rebuild the original tensor under its original name. Both have only constant
// inputs, so onnxruntime folds them when it loads the model: the graph it runs holds the very same
// float32 initializers as the unpacked model, bit for bit, at a quarter of the file size.

import type { Initializer, OnnxModel, OnnxNode } from './onnx-graph.ts';
import { intAttr } from './onnx-graph.ts';

/** Tensors smaller than this stay as they are: the two nodes and the palette would outweigh the gain. */
const MIN_PACKED_ELEMENTS = 4096;
/** onnx.TensorProto.DataType.INT32: Gather's index type (uint8/uint16 are not valid indices). */
const DATA_TYPE_INT32 = 6;

/** The tensor's palette (distinct bit patterns, ascending) and each element's index into it. */
function palette(data: Float32Array): { values: Float32Array; index: Uint8Array | Uint16Array } | null {
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
  const distinct = new Set<number>();
  for (const b of bits) {
    distinct.add(b);
    if (distinct.size > 65536) return null;
  }
  const sorted = Uint32Array.from(distinct).sort();
  const position = new Map<number, number>(Array.from(sorted, (b, i) => [b, i]));
  const index = sorted.length <= 256 ? new Uint8Array(bits.length) : new Uint16Array(bits.length);
  for (let i = 0; i < bits.length; i++) index[i] = position.get(bits[i] as number) as number;
  return { values: new Float32Array(sorted.buffer), index };
}

/** The model with every large float initializer that has at most 65,536 distinct values packed. */
export function packWeights(model: OnnxModel): OnnxModel {
  const initializers: Initializer[] = [];
  const unpack: OnnxNode[] = [];
  for (const t of model.initializers) {
    const packed =
      t.data instanceof Float32Array && t.data.length >= MIN_PACKED_ELEMENTS ? palette(t.data) : null;
    if (!packed) {
      initializers.push(t);
      continue;
    }
    const [values, index, index32] = [`${t.name}/palette`, `${t.name}/index`, `${t.name}/index32`];
    initializers.push(
      { name: values, dims: [packed.values.length], data: packed.values },
      { name: index, dims: t.dims, data: packed.index },
    );
    unpack.push(
      {
        name: index32,
        opType: 'Cast',
        inputs: [index],
        outputs: [index32],
        attributes: [intAttr('to', DATA_TYPE_INT32)],
      },
      {
        name: `${t.name}/unpack`,
        opType: 'Gather',
        inputs: [values, index32],
        outputs: [t.name],
        attributes: [intAttr('axis', 0)],
      },
    );
  }
  // Nodes in topological order: the unpacking comes before every consumer.
  return { ...model, initializers, nodes: [...unpack, ...model.nodes] };
}
