#!/usr/bin/env bash
# npm run release -- --version X.Y.Z: a release of the commit checked out, made on this machine
# (docs/releasing.md says what it holds and what it does not yet):
# 1. package.json's version X.Y.Z, CHANGELOG.md's section X.Y.Z (the commits since the last release
#    tag, tools/release/changelog.ts) and the OpenAPI document that states the version, committed;
# 2. the production image (services/Dockerfile on the local Node base) for linux/amd64 and linux/arm64
#    (tools/release/arm64.sh), pushed as nsfwdetector:X.Y.Z-amd64 and -arm64 and, under X.Y.Z, one
#    multi-arch list of both (tools/release/image-index.ts), with the Envoy and Redis images the chart
#    runs (tools/kube-node/image.sh);
# 3. the chart, version and appVersion X.Y.Z, the three images by digest in its own values.yaml, pushed
#    as an OCI artifact: helm install oci://<registry>/charts/nsfwdetector --version X.Y.Z;
# 4. each image's SBOM (CycloneDX JSON of its production dependencies, @cyclonedx/cyclonedx-npm) attached
#    to it in the registry (tools/release/attach-sbom.ts);
# 5. the list and each image signed with cosign (tools/release/lib.sh: the key pair, the public key in
#    the repository);
# 6. the tag X.Y.Z on the commit of step 1.
# The registry: RELEASE_REGISTRY, by default the local node's (127.0.0.1:5000) (tools/release/lib.sh).
# Prints what it made and, last, `release: X.Y.Z in N s`.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=""
while (($#)); do
  case $1 in
  --version) version=${2:-}; shift 2 || true ;;
  --version=*) version=${1#--version=}; shift ;;
  *) echo "release: unknown argument $1 (usage: npm run release -- --version X.Y.Z)" >&2; exit 2 ;;
  esac
done
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release: --version takes X.Y.Z, not \"$version\"" >&2; exit 2; }
((EUID == 0)) || { echo "release: needs root (the private dockerd builds the images)" >&2; exit 1; }
if git rev-parse -q --verify "refs/tags/$version" >/dev/null; then
  echo "release: the tag $version exists already" >&2
  exit 1
fi
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  echo "release: the work tree has uncommitted changes: a release is made from a commit" >&2
  exit 1
fi
T0=$SECONDS
# The SBOM generator, pinned.
CYCLONEDX_NPM_VERSION=6.0.1

. tools/release/lib.sh
trap 'stop_registry' EXIT
start_registry
# cosign and the key pair first: a new public key is part of the release commit.
install_cosign
ensure_key_pair

# 1. The version and the changelog, committed: the release is that commit.
npm version "$version" --no-git-tag-version --allow-same-version >/dev/null
node --import tsx tools/release/changelog.ts --version "$version" --write
# The published API document states the version: regenerated, or the release commit fails its own check.
npm run -s openapi >/dev/null
git add CHANGELOG.md package.json package-lock.json services/health/openapi.json "$PUBLIC_KEY"
git commit -q -m "Release $version: package.json's version, CHANGELOG.md, the OpenAPI document's version"
commit=$(git rev-parse --short HEAD)

# 2 and 3. The images and the chart (kube:image's build, tagged and versioned as the release).
t=$SECONDS
out=$(KUBE_IMAGE_TAG=$version KUBE_CHART_VERSION=$version KUBE_IMAGE_ARM64=1 bash tools/kube-node/image.sh)
grep '^kube-image: ' <<<"$out" | sed 's/^kube-image: /release: /'
image=$(tail -n1 <<<"$out")
echo "release: images and chart in $((SECONDS - t)) s"

# 4. The SBOM, from the lockfile (what each image's npm ci installs: the same packages, each image
# holding its own architecture's binaries of them), attached to each image of the list.
sbom=$(mktemp --suffix=.cdx.json)
trap 'rm -f "$sbom"; stop_registry' EXIT
npx --yes "@cyclonedx/cyclonedx-npm@$CYCLONEDX_NPM_VERSION" --omit dev --package-lock-only --output-format JSON \
  --output-file "$sbom"
for platform_image in $(list_images "${image#*@}"); do
  referrer=$(node --import tsx tools/release/attach-sbom.ts "$registry" nsfwdetector "${platform_image#*=}" "$sbom")
  echo "release: SBOM (CycloneDX, $(node -p "require('$sbom').components.length") components, $(($(stat -c %s "$sbom") / 1000)) kB) attached to the ${platform_image%=*} image ${platform_image#*=}: $registry/nsfwdetector@$referrer"
done

# 5. The list and each of its images signed (by digest) with the release key; the signatures beside
# them in the registry.
COSIGN_PASSWORD='' "$COSIGN" sign --recursive --key "$SIGNING_KEY" --tlog-upload=false --yes \
  "${COSIGN_REGISTRY_FLAGS[@]}" "$image" >/dev/null
echo "release: signed $image and each of its images with $PUBLIC_KEY's key"

# 6. The tag.
git tag -a "$version" -m "nsfwdetector $version" "$commit"
echo "release: tag $version on $commit; image $image"
echo "release: $version in $((SECONDS - T0)) s"
