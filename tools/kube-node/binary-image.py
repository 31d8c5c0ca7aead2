"""An OCI image archive holding one static binary, for `ctr images import` (no Docker involved).

usage: binary-image.py BINARY PATH_IN_IMAGE IMAGE_NAME OUT.tar [USER]

The add-on images of the local node (pause, CoreDNS, metrics-server) are a single static binary each,
FROM scratch in effect: one uncompressed layer, the binary as the entry point.
"""

import hashlib
import io
import json
import sys
import tarfile


def blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def main() -> None:
    binary, path, name, out = sys.argv[1:5]
    user = sys.argv[5] if len(sys.argv) > 5 else "65535:65535"
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        with open(binary, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode = len(data), 0o755
        layer.addfile(info, io.BytesIO(data))
    layer_bytes = layer_buf.getvalue()
    with tarfile.open(out, "w") as tar:
        layer_digest = blob(tar, layer_bytes)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [path], "User": user, "Env": ["PATH=/"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
        config_bytes = json.dumps(config).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(tar, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": len(layer_bytes),
                }
            ],
        }
        manifest_bytes = json.dumps(manifest).encode()
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": blob(tar, manifest_bytes),
                    "size": len(manifest_bytes),
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        for file_name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(index).encode())):
            info = tarfile.TarInfo(file_name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


main()
