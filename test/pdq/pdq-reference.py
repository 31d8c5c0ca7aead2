# The reference side of pdq-parity.test.ts: for each job, the PDQ that Meta's Python users get —
# threatexchange 1.2.17's hasher (hex format) over pdqhash 0.2.8 (the C++ reference) — from the same
# decoded pixels, the eight dihedral hashes pdqhash.compute_dihedral gives, and, where the job names a
# file, what threatexchange's pdq_from_file makes of the file itself (Pillow decoding it).
import json
import sys

import numpy as np
import pdqhash
from threatexchange.signal_type.pdq.pdq_hasher import _pdq_from_numpy_array, pdq_from_file


def hex_of(vector):
    return "%064x" % int("".join(str(int(b)) for b in vector), 2)


for job in json.load(open(sys.argv[1])):
    pixels = np.fromfile(job["rgb"], dtype=np.uint8).reshape(job["height"], job["width"], 3)
    hash_hex, quality = _pdq_from_numpy_array(pixels)
    dihedral, _ = pdqhash.compute_dihedral(pixels)
    out = {"name": job["name"], "hash": hash_hex, "quality": int(quality), "dihedral": [hex_of(v) for v in dihedral]}
    if job.get("file"):
        try:
            file_hash, file_quality = pdq_from_file(job["file"])
            out["file"] = {"hash": file_hash, "quality": int(file_quality)}
        except Exception as err:  # Pillow cannot open some of the corpus (the service can)
            out["file"] = {"error": type(err).__name__}
    print(json.dumps(out), flush=True)
