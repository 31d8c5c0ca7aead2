#!/usr/bin/env bash
# Builds services/Dockerfile on the local Node base (.ci/docker-base.sh) and starts each entry point in
# the image as CI would deploy it: non-root, read-only root filesystem, /tmp a tmpfs, no capabilities.
# Each must answer its readiness probe; the all-in-one server scores a PNG and a JPEG (the libjpeg fast
# path); tsx is absent.
# Starts dockerd when none runs (and stops it at the end). Fails when docker cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."

started_dockerd=""
# Container ids go to a file: start() runs in a command substitution (a subshell) for the last one.
containers=$(mktemp)
cleanup() {
  while read -r c; do docker rm -f "$c" >/dev/null 2>&1 || true; done <"$containers"
  rm -f "$containers"
  if [[ -n "$started_dockerd" ]]; then kill "$started_dockerd" 2>/dev/null || true; wait "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT

if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io
  dockerd >/tmp/nsfwdetector-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null
fi

base=$(bash .ci/docker-base.sh)
image=nsfwdetector:ci
t=$SECONDS
docker build --quiet -f services/Dockerfile --build-arg "NODE_BASE=$base" -t "$image" . >/dev/null
echo "image-smoke: built $image on $base in $((SECONDS - t)) s"

run_args=(--detach --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL --security-opt no-new-privileges
  --publish 127.0.0.1::8080 -e HOST=0.0.0.0)

# start NAME ENTRY ENV... -> waits for /internal/ready on the published port, prints the base URL.
start() {
  local name=$1 entry=$2; shift 2
  local env_args=() c url
  for e in "$@"; do env_args+=(-e "$e"); done
  c=$(docker run "${run_args[@]}" "${env_args[@]}" "$image" "$entry")
  echo "$c" >>"$containers"
  url="http://$(docker port "$c" 8080/tcp | head -n1)"
  for _ in $(seq 1 240); do
    if curl -fsS "$url/internal/ready" >/dev/null 2>&1; then
      echo "image-smoke: $name ($entry) ready as uid $(docker exec "$c" id -u)" >&2
      echo "$url"
      return 0
    fi
    if [[ "$(docker inspect -f '{{.State.Running}}' "$c")" != true ]]; then break; fi
    sleep 0.5
  done
  docker logs "$c" >&2 || true
  echo "image-smoke: $name did not become ready" >&2
  return 1
}

start health dist/services/health/server.js HEALTH_PORT=8080 >/dev/null
start detect dist/services/detect/server.js DETECT_PORT=8080 EDGE_SECRET=image-smoke-edge-secret-0123 SCORING_WORKERS=1 >/dev/null
start quota dist/services/quota/server.js QUOTA_PORT=8080 ACCOUNTS_FILE=/tmp/accounts.json >/dev/null
url=$(start all-in-one dist/services/all-in-one/server.js PORT=8080 ACCOUNTS_FILE=/tmp/accounts.json SCORING_WORKERS=1)

# A PNG (sharp) and a JPEG (the libjpeg fast path, which the image requires: JPEG_DECODER=libjpeg).
for format in png jpeg; do
  img=$(mktemp)
  node -e "require('sharp')({create:{width:64,height:64,channels:3,background:'#808080'}}).toFormat(process.argv[2]).toFile(process.argv[1])" "$img" "$format"
  answer=$(curl -sS -H "content-type: image/$format" --data-binary "@$img" "$url/api/public/detect")
  rm -f "$img"
  node -e 'const a = JSON.parse(process.argv[1]); if (!["allow", "review", "block"].includes(a.data?.decision)) { console.error(a); process.exit(1); }' "$answer"
  echo "image-smoke: all-in-one scored a $format image: $answer"
done
if ! docker logs "$(tail -n1 "$containers")" 2>&1 | grep -q '"jpegDecoder":"libjpeg"'; then
  echo "image-smoke: the all-in-one server does not decode JPEGs with the libjpeg fast path" >&2
  exit 1
fi

if docker run --rm --read-only "$image" -e "import('tsx').then(() => process.exit(1), () => process.exit(0))"; then
  echo "image-smoke: no tsx in the image"
else
  echo "image-smoke: tsx is in the runtime image" >&2
  exit 1
fi
node_version=$(docker run --rm --read-only "$image" --version)
echo "image-smoke: runtime node $node_version"
[[ "$node_version" == v24.* ]]
