# The reference side of pdq-parity.test.ts: for each job, the PDQ that Meta's Python users get —
# threatexchange 1.2.17's hasher (hex format) over pdqhash 0.2.8 (the C++ reference) — from the same
# decoded pixels: once as the service sizes them first (a side of 1024 or more averaged over blocks, as
# pdq.ts's pdqReduce describes, redone here in numpy), and once the frame itself (what threatexchange's
# Python hasher hashes); the eight dihedral hashes pdqhash.compute_dihedral gives; and, where the job
# names a file, what threatexchange's pdq_from_file makes of the file itself (Pillow decoding it).
import json
import sys

import numpy as np
import pdqhash
from threatexchange.signal_type.pdq.pdq_hasher import _pdq_from_numpy_array, pdq_from_file

REDUCE_SIDE = 512  # pdq.ts's PDQ_REDUCE_SIDE
MAX_BLOCK = 257  # pdq.ts's PDQ_MAX_BLOCK


def hex_of(vector):
    return "%064x" % int("".join(str(int(b)) for b in vector), 2)


def reduced(pixels):
    # A side of 2 * REDUCE_SIDE or more: the means of k-pixel blocks (k = side // REDUCE_SIDE, at most
    # MAX_BLOCK), each channel's sum over the block's pixel count rounded half up, the remainders dropped.
    height, width = pixels.shape[:2]
    ky = min(height // REDUCE_SIDE, MAX_BLOCK) if height >= 2 * REDUCE_SIDE else 1
    kx = min(width // REDUCE_SIDE, MAX_BLOCK) if width >= 2 * REDUCE_SIDE else 1
    if kx * ky == 1:
        return pixels
    rows, cols, n = height // ky, width // kx, kx * ky
    blocks = pixels[: rows * ky, : cols * kx].astype(np.uint32).reshape(rows, ky, cols, kx, 3)
    return ((blocks.sum(axis=(1, 3)) + n // 2) // n).astype(np.uint8)


for job in json.load(open(sys.argv[1])):
    frame = np.fromfile(job["rgb"], dtype=np.uint8).reshape(job["height"], job["width"], 3)
    pixels = reduced(frame)
    hash_hex, quality = _pdq_from_numpy_array(pixels)
    dihedral, _ = pdqhash.compute_dihedral(pixels)
    full_hex, full_quality = _pdq_from_numpy_array(frame)
    full_dihedral, _ = pdqhash.compute_dihedral(frame)
    out = {
        "name": job["name"],
        "hash": hash_hex,
        "quality": int(quality),
        "dihedral": [hex_of(v) for v in dihedral],
        "reduced": pixels is not frame,
        "full": {"hash": full_hex, "quality": int(full_quality), "dihedral": [hex_of(v) for v in full_dihedral]},
    }
    if job.get("file"):
        try:
            file_hash, file_quality = pdq_from_file(job["file"])
            out["file"] = {"hash": file_hash, "quality": int(file_quality)}
        except Exception as err:  # Pillow cannot open some of the corpus (the service can)
            out["file"] = {"error": type(err).__name__}
    print(json.dumps(out), flush=True)
