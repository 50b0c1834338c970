#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what tests/bench/peers/ compares preduce with, from Debian:
# Open MPI (mpicc, mpirun) and Gloo, or the Debian packages named as
# arguments. Idempotent and quiet when present.
set -euo pipefail
pkgs=(libopenmpi-dev openmpi-bin libgloo-dev g++)
[ $# -eq 0 ] || pkgs=("$@")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "bench-peers needs: ${missing[*]} (apt-get install them as root)" >&2
    exit 1
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
