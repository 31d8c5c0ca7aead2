#!/usr/bin/env bash
# usage: runtime-root.sh NODE_BINARY, in /app of the image's build (services/Dockerfile; the release's arm64
# image, tools/release/arm64.Dockerfile): assembles the runtime's root filesystem in /runtime: the Node
# binary, stripped (NODE_BINARY is the one to copy, or the system's /usr/local/bin/node, stripped here), the
# shared libraries it and the native modules (onnxruntime, sharp's libvips, the JPEG addon) load from the
# system, as ldd finds them (their own libraries stay in node_modules), the users and groups.
# No shell, no package manager, no npm: a third of the Debian base's size. The official Node binary carries
# its debug information (18 MB); stripped, it keeps the dynamic symbols the native addons link against.
set -euo pipefail
mkdir -p /runtime/usr/local/bin /runtime/etc /runtime/tmp && chmod 1777 /runtime/tmp
if [[ -n "${1:-}" ]]; then
  cp "$1" /runtime/usr/local/bin/node
else
  strip --strip-all -o /runtime/usr/local/bin/node /usr/local/bin/node
fi
find /usr/local/bin/node node_modules dist -type f \( -name node -o -name '*.node' -o -name '*.so*' \) -print0 |
  xargs -0 ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// && $3 !~ /^\/app\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
  sort -u | xargs -I{} cp --parents -L {} /runtime/
cp /etc/passwd /etc/group /runtime/etc/
printf 'hosts: files dns\n' >/runtime/etc/nsswitch.conf
test -f "/runtime/usr/lib/$(uname -m)-linux-gnu/libjpeg.so.62" -o -f "/runtime/lib/$(uname -m)-linux-gnu/libjpeg.so.62"
