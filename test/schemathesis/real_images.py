"""schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by test/openapi-schemathesis.test.ts).

Random bytes only ever reach the refusal paths (4001/4002/4005), so image bodies are also drawn from
real images of each format: the fuzz then reaches the scoring path and checks 200 answers against the
document too. NSFWDETECTOR_FUZZ_IMAGES names a JSON file {media type: [paths]} written by the test.
"""

import json
import os
from pathlib import Path

import schemathesis
from hypothesis import strategies as st

images = json.loads(Path(os.environ["NSFWDETECTOR_FUZZ_IMAGES"]).read_text())
everything = []
for media_type, paths in images.items():
    real = [Path(path).read_bytes() for path in paths]
    everything.extend(real)
    schemathesis.openapi.media_type(media_type, st.one_of(st.sampled_from(real), st.binary()))

# The multipart `file` part (format: binary).
schemathesis.openapi.format("binary", st.one_of(st.sampled_from(everything), st.binary()))
