#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages preduce builds and tests with. Runs as
# root (or through sudo); does nothing for packages already installed.
set -euo pipefail

PKGS=(
    build-essential pkg-config
    libuv1-dev libprotobuf-c-dev protobuf-c-compiler
    libinih-dev libsodium-dev libssl-dev libsystemd-dev libibverbs-dev
    check clang-format clang libclang-rt-14-dev python3 python3-numpy
    shellcheck pyflakes3
    systemd systemd-container groff-base man-db procps iproute2
    python3-torch python3-sklearn python3-pytest python3-yaml
    python3-venv python3-pip python3-setuptools python3-wheel
    dpkg-dev debhelper dh-python fakeroot lintian
)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
