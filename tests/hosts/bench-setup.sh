#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what make bench-hosts measures preduce against, from Debian:
# iperf3. Idempotent and quiet when present.
set -euo pipefail
command -v iperf3 >/dev/null && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "bench-hosts needs iperf3 (apt-get install iperf3 as root)" >&2
    exit 1
fi
echo "installing iperf3"
apt-get -o DPkg::Lock::Timeout=300 update -qq
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
    install -y -qq --no-install-recommends iperf3 >/dev/null
