"""Reduced-precision variants of models/mobilenet_v2.onnx with onnxruntime.quantization.

Run by models/quantise.ts (`npm run models:int8`) in the venv .ci/install-tools.sh builds; not meant to
be called by hand. Inputs are the float model and a directory of calibration tensors (*.f32: raw
little-endian float32 [224, 224, 3] each, produced by the server's own decode + resize, read in name
order).

  python quantise.py FLOAT.onnx CALIBRATION_DIR OUT.onnx --method static|dynamic
                     [--format qdq|qoperator] [--per-channel] [--calibrate minmax|percentile|entropy]
                     [--float-head] [--float-stem]

Determinism: the bytes must not depend on the machine, but MinMax calibration runs float inference,
whose last bits vary with the CPU's kernels (AVX2 vs AVX-512 …). So the calibrated ranges are rounded
outward to 3 significant digits before quantising: a range ulps apart gives the same scale, and a
rounded range is at most 1 % wider than the measured one.
"""

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

SIZE = 224
INPUT = "input"


class TensorDirReader(CalibrationDataReader):
    def __init__(self, directory: Path):
        self.files = sorted(directory.glob("*.f32"))
        if not self.files:
            raise SystemExit(f"no *.f32 calibration tensors in {directory}")
        self.index = 0

    def __len__(self):
        return len(self.files)

    def get_next(self):
        if self.index >= len(self.files):
            return None
        data = np.fromfile(self.files[self.index], dtype="<f4")
        if data.size != SIZE * SIZE * 3:
            raise SystemExit(f"{self.files[self.index]}: {data.size} floats, expected {SIZE * SIZE * 3}")
        self.index += 1
        return {INPUT: data.reshape(1, SIZE, SIZE, 3)}

    def rewind(self):
        self.index = 0

    def set_range(self, start_index, end_index):
        raise NotImplementedError


def round_out(x: float, down: bool) -> float:
    """x rounded away from the inside of its range to 3 significant digits (0 stays 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    step = 10 ** (math.floor(math.log10(abs(x))) - 2)
    return (math.floor(x / step) if down else math.ceil(x / step)) * step


def round_ranges(cache: Path) -> int:
    """Rounds every calibrated [lowest, highest] in the cache file outward; returns how many."""
    payload = json.loads(cache.read_text())
    count = 0

    def walk(node):
        nonlocal count
        if isinstance(node, dict):
            if "lowest" in node and "highest" in node:
                node["lowest"] = _round_value(node["lowest"], down=True)
                node["highest"] = _round_value(node["highest"], down=False)
                count += 1
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(payload)
    if count == 0:
        raise SystemExit(f"{cache}: no calibrated ranges found (onnxruntime's cache format changed?)")
    cache.write_text(json.dumps(payload))
    return count


def _round_value(value, down: bool):
    # The cache stores numpy scalars/arrays as {"data": [...], "dtype": ...} or plain numbers.
    if isinstance(value, dict) and "data" in value:
        value["data"] = _round_value(value["data"], down)
        return value
    if isinstance(value, list):
        return [_round_value(v, down) for v in value]
    return float(np.float32(round_out(float(value), down)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("float_model", type=Path)
    parser.add_argument("calibration_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--method", choices=["static", "dynamic"], required=True)
    parser.add_argument("--format", choices=["qdq", "qoperator"], default="qdq")
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--float-head", action="store_true", help="keep the dense head (Gemm, Relu, Softmax) in float")
    parser.add_argument("--float-stem", action="store_true", help="keep the first Conv in float")
    parser.add_argument("--calibrate", choices=["minmax", "percentile", "entropy"], default="minmax")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nsfwdetector-quantise-") as tmp:
        # Folds BatchNorm into Conv (ORT's basic graph optimisation) and infers shapes first, so the
        # quantised Convs carry the folded weights and quantisation sees every tensor's type.
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(args.float_model), str(pre), skip_symbolic_shape=True)
        graph = onnx.load(str(pre)).graph
        exclude = []
        if args.float_head:
            head = [n for n in graph.node if n.op_type in ("Gemm", "Relu", "Softmax")]
            exclude += [n.name for n in head]
        if args.float_stem:
            exclude.append(next(n.name for n in graph.node if n.op_type == "Conv"))
        if args.method == "dynamic":
            quantize_dynamic(
                str(pre), str(args.out), per_channel=args.per_channel, weight_type=QuantType.QInt8, nodes_to_exclude=exclude
            )
        else:
            # uint8 activations, int8 weights: what ORT's guide recommends for x86 (VNNI or not).
            options = dict(
                quant_format=QuantFormat.QDQ if args.format == "qdq" else QuantFormat.QOperator,
                per_channel=args.per_channel,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method={
                    "minmax": CalibrationMethod.MinMax,
                    "percentile": CalibrationMethod.Percentile,
                    "entropy": CalibrationMethod.Entropy,
                }[args.calibrate],
                nodes_to_exclude=exclude,
                calibration_providers=["CPUExecutionProvider"],
            )
            cache = Path(tmp) / "ranges.json"
            scratch = Path(tmp) / "unrounded.onnx"
            reader = TensorDirReader(args.calibration_dir)
            quantize_static(str(pre), str(scratch), reader, calibration_cache_path=str(cache), **options)
            ranges = round_ranges(cache)
            quantize_static(str(pre), str(args.out), None, calibration_cache_path=str(cache), **options)
            print(f"calibrated {ranges} tensors on {len(reader)} images", file=sys.stderr)
    # Sanity: the result loads and keeps the float model's input and output names.
    model = onnx.load(str(args.out))
    names = ([i.name for i in model.graph.input], [o.name for o in model.graph.output])
    if names != ([INPUT], ["probabilities"]):
        raise SystemExit(f"{args.out}: unexpected inputs/outputs {names}")


if __name__ == "__main__":
    main()
