#!/usr/bin/env bash
# npm run release:check -- --version X.Y.Z: checks a release in the registry (docs/releasing.md), as an
# operator who pins it would: the tag names a list of a linux/amd64 and a linux/arm64 image; the list's
# signature and each image's verify with tools/release/cosign.pub; the arm64 image with one layer
# changed, in a list pushed under the release's tag, fails that verification (then the tag is put back);
# an SBOM is among each image's referrers; the chart is version and appVersion X.Y.Z and names the list
# by the digest the tag names; then both images run (the arm64 one under QEMU user emulation, binfmt
# registered for that step only): /api/public/health answers on each, and the corpus scores within 1e-4
# on arm64 of amd64's for every model (tools/release/arch-parity.ts). Needs root (the release's
# dockerd). Each check prints a `release-check:` line; any failure exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=""
while (($#)); do
  case $1 in
  --version) version=${2:-}; shift 2 || true ;;
  --version=*) version=${1#--version=}; shift ;;
  *) echo "release-check: unknown argument $1 (usage: npm run release:check -- --version X.Y.Z)" >&2; exit 2 ;;
  esac
done
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release-check: --version takes X.Y.Z" >&2; exit 2; }

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
# release's dockerd: amd64 natively, arm64 under QEMU; every offered model at once (arch-parity.ts).
DOCKER_HOST=$(bash "$NODE_KIT/dockerd.sh" start)
export DOCKER_HOST
dockerd=1
binfmt_register
model=$(node --import tsx -e 'import("./tools/release/arch-parity.ts").then((m) => console.log(m.ENSEMBLE_MODEL))')
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A url
for p in "${platform_images[@]}"; do
  platform=${p%%=*} digest=${p#*=}
  docker pull -q "$repo@$digest" >/dev/null
  size=$(docker image inspect -f '{{.Size}}' "$repo@$digest")
  port=$(free_port)
  t=$SECONDS
  containers+=("$(docker run --detach --platform "$platform" --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL \
    --security-opt no-new-privileges --network host -e HOST=127.0.0.1 -e "PORT=$port" -e ACCOUNTS_FILE=/tmp/accounts.json \
    -e SCORING_WORKERS=1 -e "MODEL=$model" -e ANON_PER_MINUTE=1000000 -e ANON_PER_DAY=1000000 "$repo@$digest")")
  u=http://127.0.0.1:$port
  for _ in $(seq 1 1200); do
    curl -fsS "$u/internal/ready" >/dev/null 2>&1 && break
    [[ "$(docker inspect -f '{{.State.Running}}' "${containers[-1]}")" == true ]] || break
    sleep 0.5
  done
  health=$(curl -fsS "$u/api/public/health") || { docker logs "${containers[-1]}" >&2; fail "the $platform image did not answer /api/public/health"; }
  curl -fsS "$u/internal/ready" >/dev/null || { docker logs "${containers[-1]}" >&2; fail "the $platform image is not ready"; }
  arch=$(docker exec "${containers[-1]}" node -p 'process.arch')
  # JPEG_DECODER=libjpeg in the image: ready means the JPEG addon (cross-compiled for arm64) loaded; the
  # boot log says so.
  logs=$(docker logs "${containers[-1]}" 2>&1)
  grep -q '"jpegDecoder":"libjpeg"' <<<"$logs" || fail "the $platform image does not decode JPEGs with the libjpeg addon"
  echo "release-check: $platform image $digest ($((size / 1000000)) MB; node's process.arch $arch; JPEGs by the libjpeg addon) ready in $((SECONDS - t)) s; /api/public/health: $health"
  url[$platform]=$u
done
node --import tsx tools/release/arch-parity.ts "${url[linux/amd64]}" "${url[linux/arm64]}" | sed 's/^arch-parity: /release-check: arm64 vs amd64: /' ||
  fail "the arm64 image's scores are not amd64's"
