// Translates a Keras functional model (channels_last, as exported by nsfwjs) into an ONNX graph
// (NCHW). The graph input stays NHWC float32 [N, S, S, 3] in [0, 1] — exactly the tensor nsfwjs
// hands to model.predict after its /255 and resize — and is transposed to NCHW once. The output
// `probabilities` [N, 5] is the softmax of the last Dense layer, in nsfwjs's class order.
//
// Numerics follow tfjs: TF "same" padding (odd pixel bottom/right), ZeroPadding2D folded into the
// next convolution, average pooling that excludes padding from the divisor, BN in inference form.
// Conv+BN+Clip fusion is left to onnxruntime's optimizer.

import { CLASS_NAMES } from '../services/detect/model/classifier.ts';
import type { KerasLayer, KerasModel } from './keras-weights.ts';
import {
  type Attribute,
  floatAttr,
  type Initializer,
  intAttr,
  intsAttr,
  type OnnxModel,
  type OnnxNode,
} from './onnx-graph.ts';

export const INPUT_NAME = 'input';
export const OUTPUT_NAME = 'probabilities';
const BATCH = 'N';

/** A Keras tensor as it exists in the ONNX graph: NCHW (or [N, features] after Flatten). */
interface Value {
  name: string;
  channels: number;
  /** Spatial size; null once flattened. */
  h: number | null;
  w: number | null;
  /** ZeroPadding2D not yet materialized: [top, left, bottom, right], folded into the consumer. */
  pad: [number, number, number, number] | null;
}

function pair(v: unknown, what: string): [number, number] {
  if (typeof v === 'number') return [v, v];
  if (Array.isArray(v) && v.length === 2) {
    const [a, b] = v;
    if (typeof a === 'number' && typeof b === 'number') return [a, b];
  }
  throw new Error(`${what}: expected a number or a pair, got ${JSON.stringify(v)}`);
}

/** ZeroPadding2D's n | [h, w] | [[top, bottom], [left, right]] as [top, left, bottom, right]. */
function zeroPadding(p: unknown, what: string): [number, number, number, number] {
  if (Array.isArray(p) && p.length === 2 && Array.isArray(p[0])) {
    const [t, b] = pair(p[0], what);
    const [l, r] = pair(p[1], what);
    return [t, l, b, r];
  }
  const [h, w] = pair(p, what);
  return [h, w, h, w];
}

/** TF's "same": output ceil(in / stride), total padding split with the odd pixel at the end. */
function samePads(size: number, kernel: number, stride: number): [number, number] {
  const out = Math.ceil(size / stride);
  const total = Math.max((out - 1) * stride + kernel - size, 0);
  const before = Math.floor(total / 2);
  return [before, total - before];
}

class Translator {
  readonly nodes: OnnxNode[] = [];
  readonly initializers: Initializer[] = [];
  private readonly values = new Map<string, Value>();
  private readonly constants = new Map<string, string>();

  constructor(private readonly model: KerasModel) {}

  private weight(layer: string, kind: string, shape: readonly number[]) {
    const w = this.model.weights.get(`${layer}/${kind}`);
    if (!w) throw new Error(`${this.model.name}: missing weight ${layer}/${kind}`);
    if (w.shape.join() !== shape.join()) {
      throw new Error(`${layer}/${kind}: shape ${w.shape.join('x')}, expected ${shape.join('x')}`);
    }
    return w.values;
  }

  private init(name: string, dims: readonly number[], data: Float32Array | BigInt64Array): string {
    this.initializers.push({ name, dims, data });
    return name;
  }

  /** Scalar constant shared by every node that needs it (Clip bounds). */
  private scalar(value: number): string {
    const key = String(value);
    let name = this.constants.get(key);
    if (!name) {
      name = this.init(`const_${key}`, [], Float32Array.of(value));
      this.constants.set(key, name);
    }
    return name;
  }

  private node(name: string, opType: string, inputs: string[], attributes: Attribute[] = [], output = name) {
    this.nodes.push({ name, opType, inputs, outputs: [output], attributes });
    return output;
  }

  private input(layer: KerasLayer, index = 0): Value {
    const node = layer.inbound_nodes[0]?.[index];
    if (!node || layer.inbound_nodes.length !== 1)
      throw new Error(`${layer.name}: expected one inbound node`);
    const [src, nodeIndex, tensorIndex] = node;
    const v = this.values.get(src);
    if (!v || nodeIndex !== 0 || tensorIndex !== 0) throw new Error(`${layer.name}: unknown input ${src}`);
    return v;
  }

  private inputs(layer: KerasLayer): Value[] {
    return (layer.inbound_nodes[0] ?? []).map((_, i) => this.input(layer, i));
  }

  /** An input whose pending zero padding, if any, is made an explicit Pad node. */
  private padded(layer: KerasLayer, v: Value): Value {
    if (!v.pad) return v;
    const [t, l, b, r] = v.pad;
    const pads = this.init(
      `${layer.name}/pads`,
      [8],
      BigInt64Array.of(0n, 0n, BigInt(t), BigInt(l), 0n, 0n, BigInt(b), BigInt(r)),
    );
    const name = this.node(`${layer.name}/pad`, 'Pad', [v.name, pads]);
    return { ...v, name, pad: null };
  }

  private activation(layer: KerasLayer, x: string, activation: unknown, flat: boolean): string {
    switch (activation) {
      case 'linear':
      case undefined:
        return x;
      case 'relu':
        return this.node(`${layer.name}/relu`, 'Relu', [x]);
      case 'softmax':
        if (!flat) throw new Error(`${layer.name}: softmax only on [N, features]`);
        return this.node(`${layer.name}/softmax`, 'Softmax', [x], [intAttr('axis', 1)]);
      default:
        throw new Error(`${layer.name}: unsupported activation ${String(activation)}`);
    }
  }

  private spatial(v: Value, layer: KerasLayer): [number, number] {
    if (v.h === null || v.w === null) throw new Error(`${layer.name}: needs a 4-D input`);
    return [v.h, v.w];
  }

  /**
   * Pads [top, left, bottom, right] and output size of a window op on v. v's size already counts a
   * pending ZeroPadding2D, which becomes part of the op's own pads; "same" is computed on that size.
   */
  private window(v: Value, layer: KerasLayer, kernel: [number, number], strides: [number, number]) {
    const [h0, w0] = this.spatial(v, layer);
    let [t, b] = [0, 0];
    let [l, r] = [0, 0];
    const padding = layer.config.padding;
    if (padding === 'same') {
      [t, b] = samePads(h0, kernel[0], strides[0]);
      [l, r] = samePads(w0, kernel[1], strides[1]);
    } else if (padding !== 'valid') {
      throw new Error(`${layer.name}: unsupported padding ${String(padding)}`);
    }
    const [pt, pl, pb, pr] = v.pad ?? [0, 0, 0, 0];
    return {
      pads: [pt + t, pl + l, pb + b, pr + r],
      h: Math.floor((h0 + t + b - kernel[0]) / strides[0]) + 1,
      w: Math.floor((w0 + l + r - kernel[1]) / strides[1]) + 1,
    };
  }

  private checkCommon(layer: KerasLayer): void {
    const c = layer.config;
    if (c.data_format !== undefined && c.data_format !== 'channels_last') {
      throw new Error(`${layer.name}: unsupported data_format ${String(c.data_format)}`);
    }
    if (c.dilation_rate !== undefined && pair(c.dilation_rate, layer.name).some((d) => d !== 1)) {
      throw new Error(`${layer.name}: dilation is not supported`);
    }
  }

  private conv(layer: KerasLayer, depthwise: boolean): Value {
    this.checkCommon(layer);
    const c = layer.config;
    const x = this.input(layer);
    const kernel = pair(c.kernel_size, layer.name);
    const strides = pair(c.strides, layer.name);
    const [kh, kw] = kernel;
    const cin = x.channels;
    let weights: Float32Array;
    let cout: number;
    let group = 1;
    if (depthwise) {
      const m = Number(c.depth_multiplier ?? 1);
      const src = this.weight(layer.name, 'depthwise_kernel', [kh, kw, cin, m]);
      // [kh, kw, C, M] → [C*M, 1, kh, kw]; output channel c*M + m, as TF orders it.
      cout = cin * m;
      group = cin;
      weights = new Float32Array(src.length);
      for (let i = 0; i < kh; i++)
        for (let j = 0; j < kw; j++)
          for (let ci = 0; ci < cin; ci++)
            for (let mi = 0; mi < m; mi++)
              weights[(ci * m + mi) * kh * kw + i * kw + j] = src[
                ((i * kw + j) * cin + ci) * m + mi
              ] as number;
    } else {
      cout = Number(c.filters);
      const src = this.weight(layer.name, 'kernel', [kh, kw, cin, cout]);
      // HWIO → OIHW
      weights = new Float32Array(src.length);
      for (let i = 0; i < kh; i++)
        for (let j = 0; j < kw; j++)
          for (let ci = 0; ci < cin; ci++)
            for (let co = 0; co < cout; co++)
              weights[((co * cin + ci) * kh + i) * kw + j] = src[
                ((i * kw + j) * cin + ci) * cout + co
              ] as number;
    }
    const inputs = [x.name, this.init(`${layer.name}/weight`, [cout, cin / group, kh, kw], weights)];
    if (c.use_bias)
      inputs.push(this.init(`${layer.name}/bias`, [cout], this.weight(layer.name, 'bias', [cout])));
    const { pads, h, w } = this.window(x, layer, kernel, strides);
    const out = this.node(layer.name, 'Conv', inputs, [
      intsAttr('dilations', [1, 1]),
      intAttr('group', group),
      intsAttr('kernel_shape', kernel),
      intsAttr('pads', pads),
      intsAttr('strides', strides),
    ]);
    return { name: this.activation(layer, out, c.activation, false), channels: cout, h, w, pad: null };
  }

  private pool(layer: KerasLayer, op: 'MaxPool' | 'AveragePool'): Value {
    this.checkCommon(layer);
    const c = layer.config;
    const x = this.padded(layer, this.input(layer));
    const kernel = pair(c.pool_size, layer.name);
    const strides = c.strides == null ? kernel : pair(c.strides, layer.name);
    const { pads, h, w } = this.window(x, layer, kernel, strides);
    const attrs = [intsAttr('kernel_shape', kernel), intsAttr('pads', pads), intsAttr('strides', strides)];
    // tfjs divides a "same" average by the number of real (non-padding) pixels.
    if (op === 'AveragePool') attrs.push(intAttr('count_include_pad', 0));
    return { name: this.node(layer.name, op, [x.name], attrs), channels: x.channels, h, w, pad: null };
  }

  private batchNorm(layer: KerasLayer): Value {
    const c = layer.config;
    const x = this.padded(layer, this.input(layer));
    const axis = Number(c.axis);
    if (!(axis === -1 || (axis === 3 && x.h !== null) || (axis === 1 && x.h === null))) {
      throw new Error(`${layer.name}: batch norm over axis ${axis} is not the channel axis`);
    }
    const n = x.channels;
    const param = (kind: string, present: unknown, fallback: number) =>
      this.init(
        `${layer.name}/${kind}`,
        [n],
        present === false ? new Float32Array(n).fill(fallback) : this.weight(layer.name, kind, [n]),
      );
    const inputs = [
      x.name,
      param('gamma', c.scale, 1), // InceptionV3's BNs have scale: false → gamma = 1
      param('beta', c.center, 0),
      param('moving_mean', true, 0),
      param('moving_variance', true, 1),
    ];
    const name = this.node(layer.name, 'BatchNormalization', inputs, [
      floatAttr('epsilon', Number(c.epsilon)),
    ]);
    return { ...x, name };
  }

  private relu(layer: KerasLayer): Value {
    const c = layer.config;
    const x = this.padded(layer, this.input(layer));
    if (Number(c.negative_slope ?? 0) !== 0 || Number(c.threshold ?? 0) !== 0) {
      throw new Error(`${layer.name}: only plain ReLU / ReLU(max_value) are supported`);
    }
    const name =
      c.max_value == null
        ? this.node(layer.name, 'Relu', [x.name])
        : this.node(layer.name, 'Clip', [x.name, this.scalar(0), this.scalar(Number(c.max_value))]);
    return { ...x, name };
  }

  private translate(layer: KerasLayer): Value {
    const c = layer.config;
    switch (layer.class_name) {
      case 'InputLayer': {
        const shape = c.batch_input_shape as (number | null)[];
        const [, h, w, ch] = shape;
        if (shape.length !== 4 || !h || !w || ch !== 3) {
          throw new Error(`${layer.name}: unexpected input shape ${JSON.stringify(shape)}`);
        }
        const name = this.node('input_nchw', 'Transpose', [INPUT_NAME], [intsAttr('perm', [0, 3, 1, 2])]);
        return { name, channels: ch, h, w, pad: null };
      }
      case 'ZeroPadding2D': {
        this.checkCommon(layer);
        const x = this.input(layer);
        const [t, l, b, r] = zeroPadding(c.padding, layer.name);
        const [h, w] = this.spatial(x, layer);
        const [pt, pl, pb, pr] = x.pad ?? [0, 0, 0, 0];
        return { ...x, h: h + t + b, w: w + l + r, pad: [pt + t, pl + l, pb + b, pr + r] };
      }
      case 'Conv2D':
        return this.conv(layer, false);
      case 'DepthwiseConv2D':
        return this.conv(layer, true);
      case 'BatchNormalization':
        return this.batchNorm(layer);
      case 'ReLU':
        return this.relu(layer);
      case 'Activation': {
        const x = this.padded(layer, this.input(layer));
        const name = this.activation(layer, x.name, c.activation, x.h === null);
        return { ...x, name };
      }
      case 'MaxPooling2D':
        return this.pool(layer, 'MaxPool');
      case 'AveragePooling2D':
        return this.pool(layer, 'AveragePool');
      case 'Add': {
        const xs = this.inputs(layer).map((v) => this.padded(layer, v));
        const [first, ...rest] = xs;
        if (!first || rest.length === 0) throw new Error(`${layer.name}: Add needs two or more inputs`);
        let name = first.name;
        rest.forEach((v, i) => {
          name = this.node(i === rest.length - 1 ? layer.name : `${layer.name}/${i}`, 'Add', [name, v.name]);
        });
        return { ...first, name };
      }
      case 'Concatenate': {
        const xs = this.inputs(layer).map((v) => this.padded(layer, v));
        const [first] = xs;
        if (!first || (c.axis !== -1 && c.axis !== 3) || first.h === null) {
          throw new Error(`${layer.name}: only channel concatenation of 4-D tensors is supported`);
        }
        const name = this.node(
          layer.name,
          'Concat',
          xs.map((v) => v.name),
          [intAttr('axis', 1)],
        );
        return { ...first, name, channels: xs.reduce((n, v) => n + v.channels, 0) };
      }
      case 'Flatten': {
        const x = this.padded(layer, this.input(layer));
        const [h, w] = this.spatial(x, layer);
        // Keras flattens in NHWC order; with a 1x1 map that equals NCHW order.
        const src =
          h === 1 && w === 1
            ? x.name
            : this.node(`${layer.name}/nhwc`, 'Transpose', [x.name], [intsAttr('perm', [0, 2, 3, 1])]);
        const name = this.node(layer.name, 'Flatten', [src], [intAttr('axis', 1)]);
        return { name, channels: x.channels * h * w, h: null, w: null, pad: null };
      }
      case 'Dense': {
        const x = this.input(layer);
        if (x.h !== null) throw new Error(`${layer.name}: Dense on a 4-D tensor is not supported`);
        const units = Number(c.units);
        const inputs = [
          x.name,
          this.init(
            `${layer.name}/kernel`,
            [x.channels, units],
            this.weight(layer.name, 'kernel', [x.channels, units]),
          ),
        ];
        if (c.use_bias)
          inputs.push(this.init(`${layer.name}/bias`, [units], this.weight(layer.name, 'bias', [units])));
        const out = this.node(layer.name, 'Gemm', inputs);
        return {
          name: this.activation(layer, out, c.activation, true),
          channels: units,
          h: null,
          w: null,
          pad: null,
        };
      }
      case 'Dropout':
        return this.input(layer); // identity at inference
      default:
        throw new Error(`${layer.name}: unsupported layer ${layer.class_name}`);
    }
  }

  run(): { size: number; classes: number } {
    const [inputLayer, ...moreInputs] = this.model.inputLayers;
    const [outputLayer, ...moreOutputs] = this.model.outputLayers;
    if (!inputLayer || !outputLayer || moreInputs.length || moreOutputs.length) {
      throw new Error(`${this.model.name}: expected one input and one output layer`);
    }
    for (const layer of this.model.layers) {
      if (this.values.has(layer.name)) throw new Error(`duplicate layer name ${layer.name}`);
      this.values.set(layer.name, this.translate(layer));
    }
    const input = this.values.get(inputLayer);
    const output = this.values.get(outputLayer);
    if (!input?.h || !output || output.h !== null || output.channels !== CLASS_NAMES.length) {
      throw new Error(`${this.model.name}: expected an image input and a ${CLASS_NAMES.length}-class output`);
    }
    this.node(OUTPUT_NAME, 'Identity', [output.name]);
    return { size: input.h, classes: output.channels };
  }
}

export function kerasToOnnx(model: KerasModel): OnnxModel {
  const t = new Translator(model);
  const { size, classes } = t.run();
  return {
    graphName: `nsfwjs_${model.name}`,
    producerName: 'nsfwdetector models/convert.ts',
    producerVersion: '1',
    docString: `nsfwjs ${model.nsfwjsVersion} ${model.name}: NHWC float32 RGB in [0,1] → softmax over ${CLASS_NAMES.join(', ')}`,
    metadata: {
      source: `nsfwjs@${model.nsfwjsVersion}/dist/models/${model.name}`,
      classes: CLASS_NAMES.join(','),
      input_size: String(size),
    },
    nodes: t.nodes,
    initializers: t.initializers,
    inputs: [{ name: INPUT_NAME, shape: [BATCH, size, size, 3] }],
    outputs: [{ name: OUTPUT_NAME, shape: [BATCH, classes] }],
  };
}
