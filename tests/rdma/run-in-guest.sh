#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Usage: tests/rdma/run-in-guest.sh CMD [ARG...]
#
# Boots the Soft-RoCE test guest prepared by tests/rdma/setup.sh (QEMU, TCG,
# no network to the outside) and runs CMD in it as root, chrooted into this
# machine's / (read-only 9p), in the current directory. Inside, rxe0 is up
# on netdev d0 with 192.168.77.1/24 (GID index 1 is that IPv4 address);
# /tmp, /var/tmp, /run and /dev/shm are empty tmpfs; tests/rdma/work is the
# host's directory, writable. The command sees:
#   PREDUCE_RDMA_GUEST=1  PREDUCE_RDMA_DEV=rxe0  PREDUCE_RDMA_NETDEV=d0
#   PREDUCE_RDMA_ADDR=192.168.77.1  PREDUCE_RDMA_GID_INDEX=1
#   PREDUCE_RDMA_OUT=<host dir for results, tests/rdma/work/runs/<id>/out>
# plus every PREDUCE_* variable of the caller's environment.
#
# The guest console goes to stdout and to tests/rdma/work/runs/<id>/console.log.
# Exits with CMD's exit status, 124 if it timed out, 125 if the guest never
# reported one.
#
# Environment:
#   RDMA_HOST_TIMEOUT   seconds before QEMU is killed (default 300)
#   RDMA_GUEST_TIMEOUT  seconds CMD may run in the guest (default: host - 60)
#   RDMA_GUEST_MEM      guest memory in MiB (default 2048)
#   RDMA_GUEST_SMP      guest CPUs (default 2)
#   RDMA_GUEST_VERBOSE  1: show the kernel's boot messages
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$here/work

die() {
    echo "rdma guest: $*" >&2
    exit 125
}

[ $# -ge 1 ] || {
    echo "usage: $0 CMD [ARG...]" >&2
    exit 2
}
[ -f "$work/guest.env" ] ||
    die "no guest prepared: run tests/rdma/setup.sh first"
# shellcheck source=/dev/null
. "$work/guest.env"
[ -f "$GUEST_KERNEL" ] && [ -f "$GUEST_INITRD" ] ||
    die "kernel or initramfs missing: run tests/rdma/setup.sh again"
command -v qemu-system-x86_64 >/dev/null ||
    die "qemu-system-x86_64 not installed: run tests/rdma/setup.sh"

host_timeout=${RDMA_HOST_TIMEOUT:-300}
guest_timeout=${RDMA_GUEST_TIMEOUT:-$((host_timeout > 90 ? host_timeout - 60 : host_timeout * 2 / 3))}
mem=${RDMA_GUEST_MEM:-2048}
smp=${RDMA_GUEST_SMP:-2}

# Paths the guest must see as they are on the host. /tmp, /var/tmp, /run,
# /dev, /proc and /sys are the guest's own there.
hidden() {
    case "$1/" in
    /tmp/* | /var/tmp/* | /run/* | /dev/* | /proc/* | /sys/*) return 0 ;;
    esac
    return 1
}
cwd=$(pwd -P)
# A checkout under one of those (CI may clone into /tmp) is bound back into
# place inside the guest, after its tmpfs mounts (guest-init.sh).
src=
if hidden "$cwd"; then
    src=$cwd
elif hidden "$work"; then
    src=$(dirname "$(dirname "$here")")
fi
case "$work" in
*,*) die "the path $work contains a comma, which QEMU's -virtfs cannot take" ;;
esac

id=$(date +%Y%m%d-%H%M%S)-$$
run=$work/runs/$id
mkdir -p "$run/out"
# Keep the 20 newest runs.
ls -1d "$work"/runs/*/ 2>/dev/null | sort | head -n -20 | xargs -r rm -rf --

shq() { # quote for POSIX sh (the guest's busybox sources guest.env)
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

{
    echo '#!/bin/bash'
    echo '# Written by tests/rdma/run-in-guest.sh; runs inside the guest.'
    while IFS= read -r v; do
        printf 'export %s=%q\n' "$v" "${!v}"
    done < <(compgen -e | grep '^PREDUCE_' || true)
    printf 'export PREDUCE_RDMA_GUEST=1 PREDUCE_RDMA_DEV=rxe0 PREDUCE_RDMA_NETDEV=d0\n'
    printf 'export PREDUCE_RDMA_ADDR=192.168.77.1 PREDUCE_RDMA_GID_INDEX=1\n'
    printf 'export PREDUCE_RDMA_OUT=%q\n' "$run/out"
    printf 'cd %q || exit 125\n' "$cwd"
    printf 'exec'
    printf ' %q' "$@"
    printf ' </dev/null\n'
} >"$run/cmd.sh"
{
    echo "WORK_PATH=$(shq "$work")"
    echo "RUN_DIR=$(shq "$run")"
    echo "CMD_FILE=$(shq "$run/cmd.sh")"
    echo "TIMEOUT=$(shq "$guest_timeout")"
    echo "SRC_PATH=$(shq "$src")"
} >"$run/guest.env"

append="console=ttyS0 panic=-1 preduce.id=$id"
# Under TCG the kernel finds the vCPUs' TSCs "unsynchronized" and falls back
# to the HPET, whose every read is an emulated MMIO access: clock_gettime()
# then costs a system call plus that access (12% of the guest's CPU in a
# profile of the all-reduce benchmark). QEMU's TSC is one clock for every
# vCPU, so the TSC is trusted, as on real hardware.
append="$append clocksource=tsc tsc=reliable"
# qboot starts -kernel faster than SeaBIOS and writes nothing to the serial
# console (SeaBIOS's output there includes a terminal reset).
bios=()
[ -f /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)
[ "${RDMA_GUEST_VERBOSE:-0}" = 1 ] || append="$append quiet"

# RDMA_GUEST_CPU: a QEMU CPU model (e.g. max); QEMU's default otherwise.
cpu=()
[ -n "${RDMA_GUEST_CPU:-}" ] && cpu=(-cpu "$RDMA_GUEST_CPU")

log=$run/console.log
echo "rdma guest: booting $GUEST_KVER (TCG, ${mem} MiB, $smp CPUs), run $id" >&2
start=$(date +%s)
# -accel tcg: KVM guests hang early in boot on this kind of machine.
# -nic none: the guest has no network to the outside.
timeout -k 10 "$host_timeout" qemu-system-x86_64 \
    -accel tcg -m "$mem" -smp "$smp" "${cpu[@]}" "${bios[@]}" \
    -nographic -monitor none -no-reboot -nic none \
    -chardev "stdio,id=con0,logfile=$log" -serial chardev:con0 \
    -kernel "$GUEST_KERNEL" -initrd "$GUEST_INITRD" -append "$append" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
    -virtfs "local,path=$work,mount_tag=work,security_model=passthrough" \
    </dev/null &
qpid=$!
interrupted=
trap 'interrupted=1; kill -TERM "$qpid" 2>/dev/null || true' INT TERM HUP
rc=0
while :; do
    wait "$qpid" && rc=0 || rc=$?
    kill -0 "$qpid" 2>/dev/null || break
done
trap - INT TERM HUP
elapsed=$(($(date +%s) - start))

st=$(tr -d '\r' <"$log" 2>/dev/null |
    sed -n 's/^.*PREDUCE-GUEST-EXIT \([0-9][0-9]*\).*$/\1/p' | tail -n 1)
if [ -n "$interrupted" ]; then
    echo "rdma guest: interrupted; QEMU stopped (log: $log)" >&2
    exit 130
fi
if [ -z "$st" ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "rdma guest: killed QEMU after $host_timeout s; no exit status (log: $log)" >&2
        exit 124
    fi
    echo "rdma guest: QEMU exited ($rc) after $elapsed s without an exit status (log: $log)" >&2
    exit 125
fi
echo "rdma guest: command exited $st; guest ran $elapsed s (log: $log)" >&2
exit "$st"
