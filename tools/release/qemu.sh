# Sourced by tools/release/*.sh and .ci/docker-base.sh (TOOLS_DIR set): QEMU user emulation of arm64.
# shellcheck shell=bash

# QEMU's aarch64 user emulator, for the arm64 image's build and check: Debian's qemu-user-static, pinned,
# its one binary taken from the package into the tools cache (not installed: the package's scripts would
# register binfmt handlers for every architecture on the host).
QEMU_DEB_VERSION=1:7.2+dfsg-7+deb12u18+b3
QEMU_AARCH64=$TOOLS_DIR/qemu-${QEMU_DEB_VERSION#*:}/qemu-aarch64-static
install_qemu() {
  [[ -x "$QEMU_AARCH64" ]] && return 0
  local work
  work=$(mktemp -d)
  (cd "$work" && apt-get download -q "qemu-user-static=$QEMU_DEB_VERSION" >/dev/null 2>&1 &&
    dpkg-deb -x qemu-user-static_*.deb x)
  mkdir -p "$(dirname "$QEMU_AARCH64")"
  cp "$work/x/usr/bin/qemu-aarch64-static" "$QEMU_AARCH64.tmp" && mv "$QEMU_AARCH64.tmp" "$QEMU_AARCH64"
  rm -rf "$work"
}

# binfmt_register / binfmt_unregister: arm64 ELF binaries run by $QEMU_AARCH64, for as long as the
# caller needs (a host setting: the caller's EXIT trap unregisters, on failure too). Flag F: the kernel
# opens the emulator at registration, so that it serves inside containers and chroots as well.
# A handler someone else registered is used as it is and left alone; binfmt_misc is mounted only if it
# is not, and unmounted again.
BINFMT=/proc/sys/fs/binfmt_misc
BINFMT_NAME=nsfwdetector-aarch64
binfmt_ours=""
binfmt_mounted=""
binfmt_register() {
  install_qemu
  if [[ ! -e "$BINFMT/register" ]]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT"
    binfmt_mounted=1
  fi
  grep -qs '^enabled' "$BINFMT/qemu-aarch64" "$BINFMT/$BINFMT_NAME" && return 0
  echo ":$BINFMT_NAME:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:$QEMU_AARCH64:F" >"$BINFMT/register"
  binfmt_ours=1
}
binfmt_unregister() {
  if [[ -n "$binfmt_ours" && -e "$BINFMT/$BINFMT_NAME" ]]; then echo -1 >"$BINFMT/$BINFMT_NAME"; fi
  binfmt_ours=""
  if [[ -n "$binfmt_mounted" ]]; then umount "$BINFMT" 2>/dev/null || true; fi
  binfmt_mounted=""
}
