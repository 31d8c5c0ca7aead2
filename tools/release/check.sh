#!/usr/bin/env bash
# npm run release:check -- --version X.Y.Z: checks a release in the registry (docs/releasing.md), as an
# operator who pins it would: the image's signature verifies with tools/release/cosign.pub; the image
# with one layer changed, pushed under the release's tag, fails that verification (then the tag is put
# back); the SBOM is among the image's referrers; the chart is version and appVersion X.Y.Z and names
# the image by the digest the tag names. Each check prints a `release-check:` line; any failure exits 1.
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
work=$(mktemp -d)
trap 'rm -rf "$work"; stop_registry' EXIT
start_registry
install_cosign
repo=$registry/nsfwdetector
fail() { echo "release-check: FAILED: $*" >&2; exit 1; }
verify() { "$COSIGN" verify --key "$PUBLIC_KEY" --insecure-ignore-tlog "${COSIGN_REGISTRY_FLAGS[@]}" "$1" 2>&1; }
digest_of() {
  curl -fsSI -H 'accept: application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json' \
    "http://$registry/v2/nsfwdetector/manifests/$1" | tr -d '\r' | sed -n 's/^docker-content-digest: //Ip'
}

released=$(digest_of "$version")
[[ "$released" == sha256:* ]] || fail "no image $repo:$version"
out=$(verify "$repo:$version") || fail "the signature of $repo:$version does not verify: $out"
echo "release-check: $repo:$version ($released) verifies with $PUBLIC_KEY"

tampered=$(node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version")
if out=$(verify "$repo:$version"); then
  node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version" --restore "$released" >/dev/null
  fail "the tampered image $tampered under $version verified: $out"
fi
node --import tsx tools/release/tamper.ts "$registry" nsfwdetector "$version" --restore "$released" >/dev/null
[[ "$(digest_of "$version")" == "$released" ]] || fail "the tag $version was not put back on $released"
echo "release-check: one layer added, pushed as $repo:$version ($tampered): refused ($(grep -m1 -io 'no matching signatures[^.]*' <<<"$out" || tail -n1 <<<"$out")); the tag put back"

referrers=$(curl -fsS -H 'accept: application/vnd.oci.image.index.v1+json' \
  "http://$registry/v2/nsfwdetector/manifests/${released/:/-}")
grep -q '"artifactType":"application/vnd.cyclonedx+json"' <<<"$referrers" || fail "no SBOM among the referrers of $released"
echo "release-check: a CycloneDX SBOM among the referrers of $released"

export HELM_CACHE_HOME=$work/helm HELM_CONFIG_HOME=$work/helm HELM_DATA_HOME=$work/helm
chart=$("$BIN/helm" show chart "oci://$registry/charts/nsfwdetector" --version "$version" --plain-http 2>/dev/null)
grep -qx "version: $version" <<<"$chart" && grep -qx "appVersion: $version" <<<"$chart" || fail "the chart is not version/appVersion $version: $chart"
images=$("$BIN/helm" template check "oci://$registry/charts/nsfwdetector" --version "$version" --plain-http 2>/dev/null |
  sed -n 's/^ *image: "\(.*\)"$/\1/p' | sort -u)
grep -qx "$repo@$released" <<<"$images" || fail "the chart does not run $repo@$released: $images"
if grep -v '@sha256:' <<<"$images"; then fail "the chart names images by tag alone"; fi
echo "release-check: chart $version runs $repo@$released and every image by digest"
