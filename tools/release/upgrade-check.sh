#!/usr/bin/env bash
# The release check's node part (npm run release:check -- --version X.Y.Z [--node] [--previous P];
# docs/releasing.md): on the local node (npm run kube:up here, npm run kube:down at the end, failures
# included), the previous release P (by default the highest chart version below X.Y.Z in the registry)
# installed from its OCI chart, then upgraded to X.Y.Z's under steady k6 traffic
# (tools/release/upgrade-check.ts): zero failed requests, accounts, keys and policies kept, a value the
# new chart does not have refused by helm upgrade. Each release's image signature is verified with
# tools/release/cosign.pub before its chart is installed. The node pulls the releases' images by digest
# from the release registry itself (a containerd hosts entry for it, in the node's configuration, which
# kube:down removes). Needs root, and the node to itself: on a shared machine, under its lock
# (flock /work/kube-node.lock …). Each check prints a `release-check:` line; any failure exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="" previous=""
while (($#)); do
  case $1 in
  --version) version=${2:-}; shift 2 || true ;;
  --version=*) version=${1#--version=}; shift ;;
  --previous) previous=${2:-}; shift 2 || true ;;
  --previous=*) previous=${1#--previous=}; shift ;;
  *) echo "release-check: unknown argument $1 (usage: upgrade-check.sh --version X.Y.Z [--previous X.Y.Z])" >&2; exit 2 ;;
  esac
done
semver='^[0-9]+\.[0-9]+\.[0-9]+$'
[[ "$version" =~ $semver ]] || { echo "release-check: --version takes X.Y.Z" >&2; exit 2; }
[[ -z "$previous" || "$previous" =~ $semver ]] || { echo "release-check: --previous takes X.Y.Z" >&2; exit 2; }
((EUID == 0)) || { echo "release-check: the node part needs root (npm run kube:up)" >&2; exit 1; }

# The local node's settings (tools/kube-node/env.sh), not the release's dockerd's that lib.sh sets (and
# check.sh exports).
unset NSFWDETECTOR_KUBE_NODE_DIR NSFWDETECTOR_KUBE_NODE_RUN NSFWDETECTOR_KUBE_DOCKER_DATA NSFWDETECTOR_KUBE_REGISTRY
. tools/kube-node/env.sh
NODE_KUBECONFIG=$KUBECONFIG NODE_CONF_DIR=$CONF_DIR NODE_STATE_DIR=$STATE_DIR NODE_REGISTRY=$REGISTRY
node_script() {
  env -u NSFWDETECTOR_KUBE_NODE_DIR -u NSFWDETECTOR_KUBE_NODE_RUN -u NSFWDETECTOR_KUBE_DOCKER_DATA \
    -u NSFWDETECTOR_KUBE_REGISTRY bash "tools/kube-node/$1"
}
. tools/release/lib.sh
fail() { echo "release-check: FAILED: $*" >&2; exit 1; }
# The node's own registry (kube:up starts it, kube:down empties it) cannot also be the release's.
[[ "$registry" != "$NODE_REGISTRY" ]] ||
  fail "the node part needs the release registry elsewhere than the node's own $NODE_REGISTRY (RELEASE_REGISTRY=127.0.0.1:5055)"
[[ ! -f "$NODE_STATE_DIR/started" ]] || fail "the local node is up or half-up (another run's?): npm run kube:down first, if it is yours"

work=$(mktemp -d)
node_up=""
cleanup() {
  local code=$?
  if [[ -n "$node_up" ]]; then
    node_script down.sh >"$work/down.log" 2>&1 || { cat "$work/down.log" >&2; code=1; }
  fi
  rm -rf "$work"
  stop_registry
  exit "$code"
}
trap cleanup EXIT
start_registry
install_cosign
export HELM_CACHE_HOME=$work/helm HELM_CONFIG_HOME=$work/helm HELM_DATA_HOME=$work/helm

if [[ -z "$previous" ]]; then
  previous=$(curl -fsS "http://$registry/v2/charts/nsfwdetector/tags/list" |
    node -e 'for (const t of JSON.parse(require("node:fs").readFileSync(0, "utf8")).tags ?? []) console.log(t)' |
    grep -E "$semver" | { cat; echo "$version"; } | sort -uV | grep -B1 -x "$version" | head -n1)
  [[ "$previous" != "$version" ]] || fail "no chart version below $version in oci://$registry/charts/nsfwdetector"
fi

# Each release's service image, as its chart names it, verified before anything of it is installed.
for v in "$previous" "$version"; do
  image=$("$BIN/helm" template check "oci://$registry/charts/nsfwdetector" --version "$v" --plain-http 2>/dev/null |
    sed -n "s#^ *image: \"\($registry/nsfwdetector@sha256:[0-9a-f]*\)\"\$#\1#p" | sort -u)
  [[ $(wc -l <<<"$image") == 1 && -n "$image" ]] || fail "chart $v does not name one $registry/nsfwdetector image by digest: $image"
  out=$("$COSIGN" verify --key "$PUBLIC_KEY" --insecure-ignore-tlog "${COSIGN_REGISTRY_FLAGS[@]}" "$image" 2>&1) ||
    fail "chart $v's image $image does not verify with $PUBLIC_KEY: $out"
  echo "release-check: chart $v's image $image verifies with $PUBLIC_KEY"
done

T0=$EPOCHREALTIME
node_up=1
node_script up.sh >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "npm run kube:up failed"; }
echo "release-check: the local node up in $(since) s"
# The node pulls the releases' images from the release registry, over plain HTTP like its own.
mkdir -p "$NODE_CONF_DIR/certs.d/$registry"
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$registry" "$registry" \
  >"$NODE_CONF_DIR/certs.d/$registry/hosts.toml"

KUBECONFIG=$NODE_KUBECONFIG KUBECTL=$KUBECTL HELM=$BIN/helm PATH="$BIN:$PATH" \
  node --import tsx tools/release/upgrade-check.ts "$registry" "$previous" "$version" \
  tools/kube-node/values-node.yaml tools/release/upgrade-values.yaml
