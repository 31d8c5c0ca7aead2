"""The Python peer of the benchmark: what a strong engineer would build instead of ours.

Starlette on uvicorn (uvloop, httptools, 2 worker processes), onnxruntime with 2 intra-op threads on
the same models/mobilenet_v2.onnx, libvips (pyvips) for decoding, and the same preprocessing as
services/detect/image/decode.ts, so its scores are ours (bench/peer.ts checks that before measuring):

  decode     first frame, EXIF orientation applied, embedded ICC profile -> sRGB (perceptual), CMYK ->
             sRGB, alpha flattened onto white, then 8-bit sRGB RGB: the libvips calls sharp makes;
  resize     tf.image.resizeBilinear(x / 255, [224, 224], alignCorners=true) computed in float64 from
             float32(v / 255) and stored as float32, in the tfjs CPU kernel's order of operations;
  model      NHWC float32 [1, 224, 224, 3] in [0, 1] -> softmax over nsfwjs's five classes;
  nsfw       porn + hentai + sexy (the same order of additions), clamped to [0, 1].

POST /api/public/detect with the raw image as the body answers our envelope,
{"code": 0, "message": "ok", "data": {"decision", "scores": {"nsfw", "sfw"}, "classes"}};
GET /ready answers 200 once this worker's model is loaded and warmed.

Run as one would deploy it (bench/python-peer/venv.ts does; port 0: uvicorn logs the one it got):

  python -m uvicorn server:app --app-dir bench/python-peer --host 127.0.0.1 --port 8000 \
      --workers 2 --loop uvloop --http httptools --no-access-log

Each worker prints {"msg": "worker ready", "pid": N} once its model is loaded and warmed. No input
guards beyond libvips's own: a benchmark peer, not a service. PEER_MODEL overrides the model path.
"""

import json
import os
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyvips
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ROOT = Path(__file__).resolve().parents[2]
MODEL = os.environ.get("PEER_MODEL", str(ROOT / "models" / "mobilenet_v2.onnx"))
SIZE = 224
CLASSES = ("drawing", "hentai", "neutral", "porn", "sexy")
ALLOW, BLOCK = 0.10, 0.90
WHITE = [255, 255, 255]

# sharp.cache(false) in ours: no decoded pixels outlive a request.
pyvips.cache_set_max(0)

# The float32 values tfjs holds after toFloat().div(255), widened to float64 (the kernel's arithmetic).
UNIT = (np.arange(256, dtype=np.float64) / 255).astype(np.float32).astype(np.float64)


def decode_rgb(body: bytes) -> np.ndarray:
    """Upright 8-bit sRGB RGB, H x W x 3: sharp's pipeline for our decode options, call for call."""
    image = pyvips.Image.new_from_buffer(body, "", access="sequential", fail_on="error")
    interpretation = image.interpretation
    sixteen = interpretation in ("rgb16", "grey16")
    if image.get_typeof("icc-profile-data") != 0 and interpretation not in ("labs", "grey16"):
        try:
            image = image.icc_transform(
                "srgb", embedded=True, depth=16 if sixteen else 8, intent="perceptual"
            )
        except pyvips.Error:
            pass  # sharp warns "Invalid embedded profile" and goes on
    elif interpretation == "cmyk":
        image = image.icc_transform("srgb", input_profile="cmyk", intent="perceptual")
    if image.hasalpha():
        image = image.flatten(background=[v * (256 if sixteen else 1) for v in WHITE])
    if image.interpretation in ("rgb16", "grey16"):
        image = image.cast("ushort")
    if image.interpretation != "srgb":
        image = image.colourspace("srgb", source_space=image.interpretation)
    if image.format != "uchar":
        image = image.cast("uchar")
    if image.get_typeof("orientation") != 0 and image.get("orientation") not in (0, 1):
        # EXIF orientation: rotating needs random access, so the (8-bit) pixels are first held in
        # memory, as sharp does; rotations and flips move pixels without changing them.
        image = image.copy_memory().autorot()
    if image.bands != 3:
        raise ValueError(f"unexpected decoder output: {image.width}x{image.height}x{image.bands}")
    return np.frombuffer(image.write_to_memory(), dtype=np.uint8).reshape(image.height, image.width, 3)


def _axis(length: int, size: int):
    """Sample positions of the align-corners kernel along one axis: low, high index and fraction."""
    ratio = (length - 1) / (size - 1) if size > 1 else float(length)
    src = ratio * np.arange(size, dtype=np.float64)
    low = np.maximum(0, np.floor(src)).astype(np.intp)
    high = np.minimum(length - 1, np.ceil(src)).astype(np.intp)
    return low, high, src - low


@lru_cache(maxsize=64)
def _plan(height: int, width: int, size: int):
    """Per input size: flat indices of the four neighbours of every output value, and the fractions
    broadcast to the output's shape (so a resize is 8 gathers and 9 in-place operations)."""
    top, bottom, row_frac = _axis(height, size)
    left, right, col_frac = _axis(width, size)
    channel = np.arange(3)

    def flat(rows, cols):
        return ((rows[:, None, None] * width + cols[None, :, None]) * 3 + channel).ravel()

    shape = (size, size, 3)
    cf = np.broadcast_to(col_frac[None, :, None], shape).ravel().copy()
    rf = np.broadcast_to(row_frac[:, None, None], shape).ravel().copy()
    return flat(top, left), flat(top, right), flat(bottom, left), flat(bottom, right), cf, rf


def resize_to_tensor(rgb: np.ndarray, size: int = SIZE) -> np.ndarray:
    """tfjs resizeBilinear(alignCorners=true) on rgb / 255: NHWC float32 [1, size, size, 3]."""
    height, width, _ = rgb.shape
    i_tl, i_tr, i_bl, i_br, cf, rf = _plan(height, width, size)
    pixels = rgb.reshape(-1)
    tl, tr = UNIT.take(pixels.take(i_tl)), UNIT.take(pixels.take(i_tr))
    bl, br = UNIT.take(pixels.take(i_bl)), UNIT.take(pixels.take(i_br))
    # The kernel's expressions, in its order: top = tl + (tr - tl) * cf; bottom = bl + (br - bl) * cf;
    # out = top + (bottom - top) * rf (float64 throughout, then stored as float32).
    tr -= tl
    tr *= cf
    tl += tr
    br -= bl
    br *= cf
    bl += br
    bl -= tl
    bl *= rf
    tl += bl
    return tl.astype(np.float32).reshape(1, size, size, 3)


def create_session() -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    # Two workers share two cores: spinning intra-op threads would burn the cores the other worker's
    # decode and inference need (ours sets the same).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(MODEL, options, providers=["CPUExecutionProvider"])


session: ort.InferenceSession | None = None


def score(body: bytes) -> dict:
    rgb = decode_rgb(body)
    probs = session.run(["probabilities"], {"input": resize_to_tensor(rgb)})[0][0]
    classes = {name: float(p) for name, p in zip(CLASSES, probs)}
    nsfw = min(1.0, max(0.0, classes["porn"] + classes["hentai"] + classes["sexy"]))
    sfw = min(1.0, max(0.0, classes["drawing"] + classes["neutral"]))
    decision = "allow" if nsfw < ALLOW else "block" if nsfw >= BLOCK else "review"
    return {
        "decision": decision,
        "scores": {"nsfw": nsfw, "sfw": sfw},
        "classes": classes,
        "image": {"width": int(rgb.shape[1]), "height": int(rgb.shape[0])},
    }


async def detect(request: Request) -> Response:
    body = await request.body()
    try:
        # Scored inline, one image at a time per worker: two workers already keep both cores busy. Handing
        # it to Starlette's thread pool (libvips and onnxruntime release the GIL) measured the same req/s
        # at twice the peak RSS (~630 vs ~315 MiB, 8 concurrent ~1 MP uploads).
        data = score(body)
    except (pyvips.Error, ValueError) as err:
        return JSONResponse({"code": 4005, "message": f"Undecodable image: {err}"}, status_code=400)
    return JSONResponse({"code": 0, "message": "ok", "data": data})


async def ready(_: Request) -> Response:
    return JSONResponse({"ready": session is not None}, status_code=200 if session else 503)


@asynccontextmanager
async def lifespan(_app):
    global session
    session = create_session()
    session.run(["probabilities"], {"input": np.zeros((1, SIZE, SIZE, 3), np.float32)})
    print(json.dumps({"msg": "worker ready", "pid": os.getpid()}), flush=True)
    yield


app = Starlette(
    routes=[Route("/api/public/detect", detect, methods=["POST"]), Route("/ready", ready)],
    lifespan=lifespan,
)
