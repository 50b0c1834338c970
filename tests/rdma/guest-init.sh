#!/bin/sh
# SPDX-License-Identifier: MIT
# /init of the Soft-RoCE test guest. tests/rdma/setup.sh copies this file
# into the initramfs next to a static busybox and the kernel modules it lists
# in /modules.list (dependencies first); tests/rdma/run-in-guest.sh boots it.
#
# It loads the modules, mounts the host's / read-only (9p tag "hostroot") at
# /newroot and the host's tests/rdma/work writable (9p tag "work") at the
# same path inside it, creates rxe0 on a dummy netdev with 192.168.77.1/24,
# runs the command the host wrote to runs/<id>/cmd.sh (chrooted, under a
# timeout), prints "PREDUCE-GUEST-EXIT <status>" on the console and powers
# off. It never returns: PID 1 exiting would panic the kernel.

PATH=/bin:/sbin
export PATH

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/console 2>&1

RDMA_DEV=rxe0
RDMA_NETDEV=d0
RDMA_ADDR=192.168.77.1
# The IPv4-mapped GID rxe derives from RDMA_ADDR (c0a8:4d01 = 192.168.77.1).
RDMA_GID=0000:0000:0000:0000:0000:ffff:c0a8:4d01

status_file=

finish() {
    st=$1
    if [ -n "$status_file" ]; then
        dmesg >"${status_file%/*}/dmesg.log" 2>/dev/null
        echo "$st" >"$status_file" 2>/dev/null
    fi
    sync
    umount /newroot"${WORK_PATH:-/nonexistent}" 2>/dev/null
    umount /work 2>/dev/null
    echo
    echo "PREDUCE-GUEST-EXIT $st"
    sync
    poweroff -f
    echo o >/proc/sysrq-trigger
    while :; do sleep 60; done
}

fail() {
    echo "rdma guest: $*"
    finish 125
}

id=
for w in $(cat /proc/cmdline); do
    case "$w" in
    preduce.id=*) id=${w#preduce.id=} ;;
    esac
done
[ -n "$id" ] || fail "no preduce.id= on the kernel command line"

while read -r m; do
    [ -n "$m" ] || continue
    insmod "/lib/modules/$m" || fail "insmod $m failed"
done </modules.list

msize=262144
mkdir -p /newroot /work
mount -t 9p -o trans=virtio,version=9p2000.L,msize=$msize,ro,cache=loose \
    hostroot /newroot || fail "cannot mount the host's / (9p tag hostroot)"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=$msize work /work ||
    fail "cannot mount the shared work directory (9p tag work)"

envf=/work/runs/$id/guest.env
[ -r "$envf" ] || fail "no $envf in the shared work directory"
# Sets WORK_PATH, RUN_DIR, CMD_FILE, TIMEOUT (single-quoted by the host).
# shellcheck source=/dev/null # written per run by tests/rdma/run-in-guest.sh
. "$envf"
[ -n "$WORK_PATH" ] && [ -n "$CMD_FILE" ] && [ -n "$TIMEOUT" ] ||
    fail "$envf lacks WORK_PATH, CMD_FILE or TIMEOUT"
status_file=/work/runs/$id/exit-status

R=/newroot
mount -t proc proc $R/proc || fail "mount proc"
mount -t sysfs sysfs $R/sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs $R/dev || fail "mount devtmpfs"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
# A checkout under /tmp, /var/tmp or /run (SRC_PATH) would vanish under the
# tmpfs mounts below: hold it aside and bind it back into place after.
if [ -n "$SRC_PATH" ]; then
    mkdir -p /src
    mount --bind "$R$SRC_PATH" /src || fail "cannot hold $SRC_PATH"
fi
for d in /tmp /var/tmp; do
    mount -t tmpfs -o mode=1777 tmpfs "$R$d" || fail "tmpfs on $d"
done
mount -t tmpfs -o mode=755 tmpfs $R/run || fail "tmpfs on /run"
if [ -n "$SRC_PATH" ]; then
    mkdir -p "$R$SRC_PATH"
    mount --bind /src "$R$SRC_PATH" || fail "cannot bind $SRC_PATH back"
fi
mount --bind /work "$R$WORK_PATH" ||
    fail "cannot bind the work directory at $WORK_PATH"

hostname preduce-rdma-guest

in_root() {
    chroot $R /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
in_root ip link set lo up || fail "ip link set lo up"
in_root ip link add $RDMA_NETDEV type dummy || fail "ip link add $RDMA_NETDEV"
in_root ip addr add $RDMA_ADDR/24 dev $RDMA_NETDEV || fail "ip addr add"
in_root ip link set $RDMA_NETDEV up || fail "ip link set $RDMA_NETDEV up"
in_root rdma link add $RDMA_DEV type rxe netdev $RDMA_NETDEV ||
    fail "rdma link add $RDMA_DEV type rxe netdev $RDMA_NETDEV"

# Wait (at most 10 s) until rxe0 has the GID of the IPv4 address.
gid_ok=
i=0
while [ $i -lt 100 ]; do
    if cat /sys/class/infiniband/$RDMA_DEV/ports/1/gids/* 2>/dev/null |
        grep -qx "$RDMA_GID"; then
        gid_ok=1
        break
    fi
    sleep 0.1
    i=$((i + 1))
done
[ -n "$gid_ok" ] || fail "$RDMA_DEV never got the GID of $RDMA_ADDR"

echo "rdma guest: $RDMA_DEV up on $RDMA_NETDEV ($RDMA_ADDR), running $CMD_FILE"
chroot $R /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp TERM=dumb LANG=C.UTF-8 TMPDIR=/tmp \
    /usr/bin/timeout -k 10 "$TIMEOUT" /bin/bash "$CMD_FILE"
st=$?
[ $st -eq 124 ] && echo "rdma guest: command timed out after $TIMEOUT s"
finish $st
