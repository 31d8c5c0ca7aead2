#!/usr/bin/env bash
# usage: arm64.sh AMD64_IMAGE ARM64_IMAGE (DOCKER_HOST set, the amd64 image built): builds the release's
# linux/arm64 image (tools/release/arm64.Dockerfile) as ARM64_IMAGE, with AMD64_IMAGE's configuration.
# Natively on amd64: the build stage (services/Dockerfile's, cached from the amd64 image's build), the
# JPEG addon cross-compiled, the arm64 dependencies; under QEMU (binfmt registered for the build's
# duration only): the arm64 loader's view of the shared libraries. Prints the image's size in MB.
# The daemon labels the image linux/amd64 (docker import ignores --platform; no buildx here): image.sh
# sets its platform in the registry once pushed (tools/release/set-platform.ts).
set -euo pipefail
cd "$(dirname "$0")/../.."
amd64=${1:?usage: arm64.sh AMD64_IMAGE ARM64_IMAGE}
arm64=${2:?usage: arm64.sh AMD64_IMAGE ARM64_IMAGE}
TOOLS_DIR=${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}
. tools/release/qemu.sh
files=""
container=""
cleanup() {
  binfmt_unregister
  if [[ -n "$container" ]]; then docker rm -f "$container" >/dev/null 2>&1 || true; fi
  if [[ -n "$files" ]]; then docker rmi "$files" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

base=$(bash .ci/docker-base.sh)
base_arm64=$(bash .ci/docker-base.sh --arch arm64)
build=nsfwdetector-build:${amd64##*:}
docker build --quiet --network host -f services/Dockerfile --target build --build-arg "NODE_BASE=$base" -t "$build" . >/dev/null
binfmt_register
files=nsfwdetector-arm64-files:${amd64##*:}
docker build --quiet --network host -f tools/release/arm64.Dockerfile --build-arg "BUILD_IMAGE=$build" \
  --build-arg "NODE_BASE_ARM64=$base_arm64" -t "$files" . >/dev/null
binfmt_unregister

# The amd64 image's configuration, as docker import's --change instructions.
mapfile -t changes < <(docker image inspect -f '{{json .Config}}' "$amd64" | node -e '
  const c = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
  const out = [];
  for (const e of c.Env ?? []) out.push(`ENV ${e.replace("=", " ")}`);
  if (c.WorkingDir) out.push(`WORKDIR ${c.WorkingDir}`);
  if (c.User) out.push(`USER ${c.User}`);
  for (const p of Object.keys(c.ExposedPorts ?? {})) out.push(`EXPOSE ${p}`);
  if (c.Entrypoint) out.push(`ENTRYPOINT ${JSON.stringify(c.Entrypoint)}`);
  if (c.Cmd) out.push(`CMD ${JSON.stringify(c.Cmd)}`);
  console.log(out.join("\n"));')
change_args=()
for c in "${changes[@]}"; do change_args+=(--change "$c"); done
container=$(docker create "$files" none)
docker export "$container" | docker import "${change_args[@]}" - "$arm64" >/dev/null
echo $(($(docker image inspect -f '{{.Size}}' "$arm64") / 1000000))
