# Sourced by tools/release/release.sh and check.sh: the node kit's settings (tools/kube-node/env.sh), the
# release's registry, cosign and the signing key pair, QEMU (tools/release/qemu.sh).
# shellcheck shell=bash

# The release's own private dockerd (tools/kube-node/dockerd.sh), state and data root (its build cache,
# kept from one release to the next): never the one a local node's run is using.
TOOLS_DIR=${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}
export NSFWDETECTOR_KUBE_NODE_DIR=$TOOLS_DIR/release-node NSFWDETECTOR_KUBE_NODE_RUN=/run/nsfwdetector-release \
  NSFWDETECTOR_KUBE_DOCKER_DATA=$TOOLS_DIR/release-docker
. "$(dirname "${BASH_SOURCE[0]}")/../kube-node/env.sh"

# The registry: RELEASE_REGISTRY, by default the local node's. When nothing answers there,
# distribution's registry (the node's own binary) serves it until the script exits, its storage in the
# tools cache (release-registry/), kept from one release to the next.
export NSFWDETECTOR_KUBE_REGISTRY=${RELEASE_REGISTRY:-$REGISTRY}
registry=$NSFWDETECTOR_KUBE_REGISTRY
registry_pid=""
registry_conf=""
stop_registry() {
  if [[ -n "$registry_pid" ]]; then kill "$registry_pid" 2>/dev/null && wait "$registry_pid" 2>/dev/null || true; fi
  rm -f "$registry_conf"
}
start_registry() {
  curl -fsS "http://$registry/v2/" >/dev/null 2>&1 && return 0
  registry_conf=$(mktemp)
  mkdir -p "$TOOLS_DIR/release-registry"
  sed -e "s#@STATE_DIR@/registry#$TOOLS_DIR/release-registry#" -e "s#@REGISTRY@#$registry#" \
    "$NODE_KIT/conf/registry.yml" >"$registry_conf"
  "$TOOLS_DIR/registry-$REGISTRY_VERSION/registry" serve "$registry_conf" >/dev/null 2>&1 &
  registry_pid=$!
  for _ in $(seq 1 60); do curl -fsS "http://$registry/v2/" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsS "http://$registry/v2/" >/dev/null
  echo "release: distribution's registry on $registry (storage $TOOLS_DIR/release-registry)"
}

# cosign, built once from the Go module proxy into the tools cache (a release tool: CI does not build it).
COSIGN_VERSION=v2.6.5
COSIGN=$TOOLS_DIR/bin/cosign-$COSIGN_VERSION
install_cosign() {
  [[ -x "$COSIGN" ]] && return 0
  mkdir -p "$TOOLS_DIR/bin" "$TOOLS_DIR/src"
  (cd "$TOOLS_DIR/src" && GOCACHE="$TOOLS_DIR/go-build" GOMODCACHE="$TOOLS_DIR/go-mod" GOFLAGS=-mod=mod \
    GOBIN="$TOOLS_DIR/cosign-$COSIGN_VERSION" CGO_ENABLED=0 \
    go install -trimpath -ldflags "-s -w" "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION")
  mv "$TOOLS_DIR/cosign-$COSIGN_VERSION/cosign" "$COSIGN" && rmdir "$TOOLS_DIR/cosign-$COSIGN_VERSION"
}
# The registry is plain HTTP on loopback; no transparency log is reachable from here.
COSIGN_REGISTRY_FLAGS=(--allow-http-registry --allow-insecure-registry)

# The signing key pair: the private key per machine, in the tools cache (never in the repository),
# made on first use without a password; the public key is tools/release/cosign.pub, committed with
# the release that first signs with it.
SIGNING_KEY=$TOOLS_DIR/release-keys/cosign.key
PUBLIC_KEY=tools/release/cosign.pub
ensure_key_pair() {
  if [[ ! -f "$SIGNING_KEY" ]]; then
    mkdir -p "$(dirname "$SIGNING_KEY")" && chmod 700 "$(dirname "$SIGNING_KEY")"
    (cd "$(dirname "$SIGNING_KEY")" && COSIGN_PASSWORD='' "$COSIGN" generate-key-pair >/dev/null)
  fi
  cp "$(dirname "$SIGNING_KEY")/cosign.pub" "$PUBLIC_KEY"
}

# list_images LIST_DIGEST: the images of the release's multi-arch list, one `os/architecture=digest` a line.
list_images() {
  curl -fsS -H 'accept: application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json' \
    "http://$registry/v2/nsfwdetector/manifests/$1" |
    node -e 'for (const m of JSON.parse(require("node:fs").readFileSync(0, "utf8")).manifests ?? [])
      console.log(`${m.platform.os}/${m.platform.architecture}=${m.digest}`)'
}

. "$(dirname "${BASH_SOURCE[0]}")/qemu.sh"
