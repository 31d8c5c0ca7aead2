#!/usr/bin/env bash
# npm run kube:image: builds the production image (services/Dockerfile on the local Node base that
# .ci/docker-base.sh makes) with a private dockerd, pushes it to the node's registry (kube:up first), and
# prints its size and, last, its reference (<registry>/nsfwdetector@sha256:…). It also pushes the two other
# images the chart runs, built locally as no public registry is reachable: Envoy (the binary the tools
# cache holds) and Redis (Debian's), and writes Helm values naming all three to
# $KUBE_NODE_DIR/state/image-values.yaml (helm install … -f that file). The chart goes there too, as an
# OCI artifact: helm install … oci://<registry>/charts/nsfwdetector --version <chart version>.
# KUBE_IMAGE_TAG (default: local) tags the image, e.g. for an upgrade to a new tag. KUBE_CHART_VERSION
# (the release, tools/release/release.sh): the chart is packaged with that version and appVersion, the
# three images by digest in its own values.yaml. NSFWDETECTOR_KUBE_REGISTRY: another registry than the node's.
# KUBE_IMAGE_ARM64 (the release): the image for linux/arm64 too, the tag and the printed digest a list of both.
set -euo pipefail
. "$(dirname "$0")/env.sh"
((EUID == 0)) || { echo "kube-node: needs root (dockerd)" >&2; exit 1; }
curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 || { echo "kube-node: no registry at $REGISTRY: npm run kube:up first" >&2; exit 1; }
TAG=${KUBE_IMAGE_TAG:-local}
ENVOY_VERSION=1.40.0

# The private dockerd (dockerd.sh), stopped at the end; kube:down stops it after a crash.
DOCKER_HOST=$(bash "$NODE_KIT/dockerd.sh" start)
export DOCKER_HOST
trap 'bash "$NODE_KIT/dockerd.sh" stop' EXIT

cd "$REPO_DIR"
base=$(bash .ci/docker-base.sh)
T0=$EPOCHREALTIME
image=$REGISTRY/nsfwdetector:$TAG
docker build --quiet --network host -f services/Dockerfile --build-arg "NODE_BASE=$base" -t "$image" . >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "kube-image: built $image in $(since) s: $((size / 1000000)) MB"
# KUBE_IMAGE_ARM64 (the release): the linux/arm64 image too (tools/release/arm64.sh), pushed beside it
# below, both under the tag as one multi-arch list.
if [[ -n "${KUBE_IMAGE_ARM64:-}" ]]; then
  T0=$EPOCHREALTIME
  size=$(bash tools/release/arm64.sh "$image" "$image-arm64")
  echo "kube-image: built $image-arm64 (linux/arm64) in $(since) s: $size MB"
fi

# Envoy and Redis on the same base: their entry points take the chart's arguments as they are.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"; bash "$NODE_KIT/dockerd.sh" stop' EXIT
cp "$(readlink -f "$BIN/envoy")" "$ctx/envoy"
printf 'FROM %s\nCOPY envoy /usr/local/bin/envoy\nUSER 1000:1000\nENTRYPOINT ["/usr/local/bin/envoy"]\n' "$base" >"$ctx/Dockerfile"
envoy=$REGISTRY/envoy:v$ENVOY_VERSION
docker build --quiet -t "$envoy" "$ctx" >/dev/null
rm -f "$ctx/envoy"
printf '%s\n' "FROM $base" \
  'RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*' \
  'USER 999:999' 'ENTRYPOINT ["redis-server"]' >"$ctx/Dockerfile"
redis=$REGISTRY/redis:7-bookworm
docker build --quiet --network host -t "$redis" "$ctx" >/dev/null

# digest IMAGE: pushes it, prints the registry's sha256 digest.
digest() { docker push "$1" | sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p' | tail -n1; }
d=$(digest "$image")
de=$(digest "$envoy")
dr=$(digest "$redis")
[[ -n "$d" && -n "$de" && -n "$dr" ]] || { echo "kube-image: a push gave no digest" >&2; exit 1; }
if [[ -n "${KUBE_IMAGE_ARM64:-}" ]]; then
  docker tag "$image" "$image-amd64"
  d_amd64=$(digest "$image-amd64")
  # The daemon labels every image it makes linux/amd64: the arm64 image's label set in the registry.
  digest "$image-arm64" >/dev/null
  d_arm64=$(node --import tsx tools/release/set-platform.ts "$REGISTRY" nsfwdetector "$TAG-arm64" linux/arm64/v8)
  [[ "$d_amd64" == "$d" && -n "$d_arm64" ]] || { echo "kube-image: the per-architecture pushes gave no digest" >&2; exit 1; }
  d=$(node --import tsx tools/release/image-index.ts "$REGISTRY" nsfwdetector "$TAG" "$d_amd64" "$d_arm64")
  echo "kube-image: $REGISTRY/nsfwdetector:$TAG is the list of linux/amd64 $d_amd64 and linux/arm64 $d_arm64: $d"
fi
cat >"$STATE_DIR/image-values.yaml" <<VALUES
# Written by npm run kube:image: the images it pushed to the node's registry.
image: {repository: "$REGISTRY/nsfwdetector", tag: "$TAG", digest: "$d"}
gateway: {envoyImage: {repository: "$REGISTRY/envoy", tag: "v$ENVOY_VERSION@$de"}}
redis: {image: {repository: "$REGISTRY/redis", tag: "7-bookworm@$dr"}}
VALUES
echo "kube-image: Helm values for the three images: $STATE_DIR/image-values.yaml"

# The chart, packaged and pushed as users install charts (helm's caches in the temp directory).
export HELM_CACHE_HOME=$ctx/helm HELM_CONFIG_HOME=$ctx/helm HELM_DATA_HOME=$ctx/helm
if [[ -n "${KUBE_CHART_VERSION:-}" ]]; then
  cp -r charts/nsfwdetector "$ctx/chart"
  node --import tsx tools/release/chart-values.ts "$ctx/chart/values.yaml" \
    "image.repository=$REGISTRY/nsfwdetector" "image.tag=$TAG" "image.digest=$d" \
    "gateway.envoyImage.repository=$REGISTRY/envoy" "gateway.envoyImage.tag=v$ENVOY_VERSION@$de" \
    "redis.image.repository=$REGISTRY/redis" "redis.image.tag=7-bookworm@$dr"
  "$BIN/helm" package "$ctx/chart" -d "$ctx" --version "$KUBE_CHART_VERSION" --app-version "$KUBE_CHART_VERSION" >/dev/null
else
  "$BIN/helm" package charts/nsfwdetector -d "$ctx" >/dev/null
fi
chart=$(ls "$ctx"/nsfwdetector-*.tgz)
"$BIN/helm" push "$chart" "oci://$REGISTRY/charts" --plain-http >/dev/null
version=$(basename "$chart" .tgz)
echo "kube-image: chart oci://$REGISTRY/charts/nsfwdetector --version ${version#nsfwdetector-}"
echo "$REGISTRY/nsfwdetector@$d"
