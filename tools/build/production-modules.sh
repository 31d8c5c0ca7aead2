#!/usr/bin/env bash
# usage: production-modules.sh ARCH (node's process.arch: x64 or arm64), in the image's build stage
# (services/Dockerfile; the release's arm64 image, tools/release/arm64.Dockerfile): replaces node_modules
# with the production dependencies for linux/ARCH, and of those only what compiled JavaScript runs there.
# npm ci's --cpu picks the optional packages of ARCH (sharp's @img/sharp-linux-ARCH and its libvips), so the
# arm64 set is installed on an amd64 builder, natively. Removed:
# - nsfwjs and its TensorFlow.js converted the models (build time only);
# - tsx (the source checkout's npm start) and its esbuild;
# - onnxruntime-node ships every platform's binaries, and the bare-* modules (tar-fs's, for the Bare
#   runtime, never loaded by Node) prebuilds for every platform: linux's for ARCH stay;
# - source maps, type declarations, Markdown, and bintrees' 2 MB of tests.
set -euo pipefail
arch=${1:?usage: production-modules.sh x64|arm64}
npm ci --omit=dev --ignore-scripts --no-audit --no-fund --os=linux --cpu="$arch"
npm uninstall --omit=dev --ignore-scripts --no-audit --no-fund --os=linux --cpu="$arch" nsfwjs
rm -rf node_modules/tsx node_modules/esbuild node_modules/@esbuild node_modules/.bin/tsx node_modules/.bin/esbuild \
  node_modules/bintrees/test
find node_modules/onnxruntime-node/bin -mindepth 3 -maxdepth 3 ! -path "*/linux/${arch}" -exec rm -rf {} +
find node_modules -mindepth 3 -maxdepth 3 -path '*/prebuilds/*' -type d ! -name "linux-${arch}" -exec rm -rf {} +
find node_modules -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.md' \) -delete
test -f "node_modules/onnxruntime-node/bin/napi-v6/linux/${arch}/onnxruntime_binding.node"
