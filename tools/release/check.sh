#!/usr/bin/env bash
# npm run release:check -- --version X.Y.Z: checks a release in the registry (docs/releasing.md), as an
# operator who pins it would: the tag names a list of a linux/amd64 and a linux/arm64 image; the list's
# signature and each image's verify with tools/release/cosign.pub; the arm64 image with one layer
# changed, in a list pushed under the release's tag, fails that verification (then the tag is put back);
# an SBOM is among each image's referrers; the chart is version and appVersion X.Y.Z and names the list
# by the digest the tag names; then both images run (the arm64 one under QEMU user emulation, binfmt
# registered for that step only): /api/public/health answers on each, and the corpus scores within 1e-4
# on arm64 of amd64's for every model (tools/release/arch-parity.ts). Needs root (the release's
# dockerd). Last, the node part (tools/release/upgrade-check.sh): the previous release (--previous, by
# default the one before X.Y.Z) installed from its OCI chart on the local node and upgraded to X.Y.Z under
# load; --node runs that part alone. Each check prints a `release-check:` line; any failure exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="" node_args=() node_only=""
usage="usage: npm run release:check -- --version X.Y.Z [--previous X.Y.Z] [--node]"
while (($#)); do
  case $1 in
  --version) version=${2:-}; shift 2 || true ;;
  --version=*) version=${1#--version=}; shift ;;
  --previous) node_args+=(--previous "${2:-}"); shift 2 || true ;;
  --previous=*) node_args+=("$1"); shift ;;
  --node) node_only=1; shift ;;
  *) echo "release-check: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release-check: --version takes X.Y.Z" >&2; exit 2; }
node_part() { bash tools/release/upgrade-check.sh --version "$version" "${node_args[@]}"; }
if [[ -n "$node_only" ]]; then node_part; exit; fi

. tools/release/lib.sh
((EUID == 0)) || { echo "release-check: needs root (the release's dockerd runs the images)" >&2; exit 1; }
work=$(mktemp -d)
containers=()
dockerd=""
cleanup() {
  binfmt_unregister
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
  if [[ -n "$dockerd" ]]; then bash "$NODE_KIT/dockerd.sh" stop; fi
  rm -rf "$work"
  stop_registry
}
trap cleanup EXIT
start_registry
install_cosign
repo=$registry/nsfwdetector
fail() { echo "release-check: FAILED: $*" >&2; exit 1; }
verify() { "$COSIGN" verify --key "$PUBLIC_KEY" --insecure-ignore-tlog "${COSIGN_REGISTRY_FLAGS[@]}" "$1" 2>&1; }
digest_of() {
  curl -fsSI -H 'accept: application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json' \
    "http://$registry/v2/nsfwdetector/manifests/$1" | tr -d '\r' | sed -n 's/^docker-content-digest: //Ip'
}

released=$(digest_of "$version")
[[ "$released" == sha256:* ]] || fail "no image $repo:$version"
mapfile -t platform_images < <(list_images "$released")
[[ "$(printf '%s\n' "${platform_images[@]%%=*}" | sort | paste -sd' ')" == "linux/amd64 linux/arm64" ]] ||
  fail "$repo:$version is not a list of a linux/amd64 and a linux/arm64 image: ${platform_images[*]}"
out=$(verify "$repo:$version") || fail "the signature of $repo:$version does not verify: $out"
echo "release-check: $repo:$version ($released, the list of ${platform_images[*]}) verifies with $PUBLIC_KEY"
for p in "${platform_images[@]}"; do
  out=$(verify "$repo@${p#*=}") || fail "the signature of the ${p%%=*} image ${p#*=} does not verify: $out"
done
echo "release-check: each image of the list verifies with $PUBLIC_KEY"

tampered=$(node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version")
if out=$(verify "$repo:$version"); then
  node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version" --restore "$released" >/dev/null
  fail "the tampered image $tampered under $version verified: $out"
fi
node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version" --restore "$released" >/dev/null
[[ "$(digest_of "$version")" == "$released" ]] || fail "the tag $version was not put back on $released"
echo "release-check: one layer added to the arm64 image, its list pushed as $repo:$version ($tampered): refused ($(grep -m1 -io 'no matching signatures[^.]*' <<<"$out" || tail -n1 <<<"$out")); the tag put back"

for p in "${platform_images[@]}"; do
  referrers=$(curl -fsS -H 'accept: application/vnd.oci.image.index.v1+json' \
    "http://$registry/v2/nsfwdetector/manifests/$(tr : - <<<"${p#*=}")") || fail "no referrers of the ${p%%=*} image"
  grep -q '"artifactType":"application/vnd.cyclonedx+json"' <<<"$referrers" || fail "no SBOM among the referrers of the ${p%%=*} image ${p#*=}"
done
echo "release-check: a CycloneDX SBOM among the referrers of each image"

export HELM_CACHE_HOME=$work/helm HELM_CONFIG_HOME=$work/helm HELM_DATA_HOME=$work/helm
chart=$("$BIN/helm" show chart "oci://$registry/charts/nsfwdetector" --version "$version" --plain-http 2>/dev/null)
grep -qx "version: $version" <<<"$chart" && grep -qx "appVersion: $version" <<<"$chart" || fail "the chart is not version/appVersion $version: $chart"
images=$("$BIN/helm" template check "oci://$registry/charts/nsfwdetector" --version "$version" --plain-http 2>/dev/null |
  sed -n 's/^ *image: "\(.*\)"$/\1/p' | sort -u)
grep -qx "$repo@$released" <<<"$images" || fail "the chart does not run $repo@$released: $images"
if grep -v '@sha256:' <<<"$images"; then fail "the chart names images by tag alone"; fi
echo "release-check: chart $version runs $repo@$released and every image by digest"

# Both images run, as the chart runs them (non-root, read-only root filesystem, no capabilities), on the
# release's dockerd: amd64 natively, arm64 under QEMU, one model at a time (each model's own decode path:
# the JPEG addon serves one model's input size, an ensemble's JPEGs go to sharp). The scoring deadline
# at its most (600 s): under QEMU inception_v3 takes over a minute an image.
# QEMU 7.2 (Debian bookworm's) passes the host's x86 /proc/cpuinfo through to arm64 programs, and
# onnxruntime's CPU detection (pytorch's cpuinfo) segfaults parsing it; later QEMUs (8.2) show an arm64
# one. The arm64 container gets one mounted (a two-core Neoverse N1's, as an AWS Graviton2's kernel writes
# it); nothing else of the image is changed.
cat >"$work/cpuinfo" <<'CPUINFO'
processor	: 0
BogoMIPS	: 243.75
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1

processor	: 1
BogoMIPS	: 243.75
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1

CPUINFO
DOCKER_HOST=$(bash "$NODE_KIT/dockerd.sh" start)
export DOCKER_HOST
dockerd=1
binfmt_register
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for p in "${platform_images[@]}"; do
  docker pull -q "$repo@${p#*=}" >/dev/null
  size=$(docker image inspect -f '{{.Size}}' "$repo@${p#*=}")
  arch=$(docker run --rm --platform "${p%%=*}" "$repo@${p#*=}" -p 'process.arch')
  echo "release-check: ${p%%=*} image ${p#*=}: $((size / 1000000)) MB, node's process.arch $arch"
done
# start PLATFORM=DIGEST MODEL: the image serving MODEL on a free port, ready: its URL in $started_url,
# its container in $started.
start() {
  local platform=${1%%=*} digest=${1#*=} port t=$SECONDS c u health mounts=()
  port=$(free_port)
  [[ $platform == linux/arm64 ]] && mounts=(-v "$work/cpuinfo:/proc/cpuinfo:ro")
  c=$(docker run --detach --platform "$platform" "${mounts[@]}" --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL \
    --security-opt no-new-privileges --network host -e HOST=127.0.0.1 -e "PORT=$port" -e ACCOUNTS_FILE=/tmp/accounts.json \
    -e SCORING_WORKERS=1 -e "MODEL=$2" -e ANON_PER_MINUTE=1000000 -e ANON_PER_DAY=1000000 \
    -e SCORING_DEADLINE_MS=600000 "$repo@$digest")
  containers+=("$c")
  u=http://127.0.0.1:$port
  for _ in $(seq 1 1200); do
    curl -fsS "$u/internal/ready" >/dev/null 2>&1 && break
    [[ "$(docker inspect -f '{{.State.Running}}' "$c")" == true ]] || break
    sleep 0.5
  done
  health=$(curl -fsS "$u/api/public/health") || { docker logs "$c" >&2; fail "the $platform image did not answer /api/public/health"; }
  curl -fsS "$u/internal/ready" >/dev/null || { docker logs "$c" >&2; fail "the $platform image with MODEL=$2 is not ready"; }
  echo "release-check: $platform image, MODEL=$2, ready in $((SECONDS - t)) s; /api/public/health: $health"
  started_url=$u started=$c
}
amd64_image=$(printf '%s\n' "${platform_images[@]}" | grep '^linux/amd64=')
arm64_image=$(printf '%s\n' "${platform_images[@]}" | grep '^linux/arm64=')
for model in $(node --import tsx tools/release/arch-parity.ts --models); do
  start "$amd64_image" "$model"
  amd64_url=$started_url amd64_c=$started
  start "$arm64_image" "$model"
  arm64_url=$started_url arm64_c=$started
  node --import tsx tools/release/arch-parity.ts "$amd64_url" "$arm64_url" "$model" |
    sed 's/^arch-parity: /release-check: arm64 vs amd64: /' || fail "the arm64 image's $model scores are not amd64's"
  # JPEG_DECODER=libjpeg in the image (a missing addon fails at boot): the JPEGs went through the JPEG
  # addon, cross-compiled for arm64, as the decoder's log line says.
  for c in "$amd64_c" "$arm64_c"; do
    logs=$(docker logs "$c" 2>&1)
    grep -q '"jpegDecoder":"libjpeg"' <<<"$logs" || fail "a $model container did not decode JPEGs with the libjpeg addon: $logs"
    docker rm -f "$c" >/dev/null
  done
  echo "release-check: $model: both images decoded the corpus's JPEGs with the libjpeg addon"
done

node_part
