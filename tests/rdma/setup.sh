#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Prepares the Soft-RoCE (rxe) test guest that tests/rdma/run-in-guest.sh
# boots: installs QEMU, busybox, cpio and the RDMA userspace from Debian,
# downloads a Debian 6.1 kernel package (vmlinuz + modules) into
# tests/rdma/work/kernel/, and builds tests/rdma/work/initramfs-<kver>.cpio.gz
# around tests/rdma/guest-init.sh. Idempotent and quiet: a second run that
# has nothing to do prints nothing. Runs as root (or with sudo for apt-get).
#
# Environment:
#   RDMA_GUEST_KERNEL  kernel release to use, e.g. 6.1.0-57-amd64 (default:
#                      the installed linux-image-6.1.0-*-amd64 if the archive
#                      has it, else the newest one the archive offers)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$here/work

die() {
    echo "rdma guest: $*" >&2
    exit 1
}

PKGS=(
    qemu-system-x86 busybox-static cpio kmod xz-utils zstd gzip
    iproute2 coreutils
    rdma-core ibverbs-providers ibverbs-utils perftest libibverbs-dev
)

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot apt-get"
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive

mkdir -p "$work"
apt_log=$work/setup-apt.log
apt_updated=0
apt_update() {
    [ "$apt_updated" -eq 1 ] && return 0
    $SUDO apt-get update -q >"$apt_log" 2>&1 ||
        { cat "$apt_log" >&2; die "apt-get update failed (log: $apt_log)"; }
    apt_updated=1
}

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# --- packages ---------------------------------------------------------------
missing=()
for p in "${PKGS[@]}"; do
    installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "rdma guest: installing ${missing[*]}"
    apt_update
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >"$apt_log" 2>&1 ||
        { tail -n 30 "$apt_log" >&2; die "apt-get install failed (log: $apt_log)"; }
fi
for t in qemu-system-x86_64 busybox cpio depmod ip rdma ibv_devinfo \
    ib_write_bw timeout; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$t" >/dev/null ||
        die "$t still missing after installing ${PKGS[*]}"
done
busybox=$(command -v busybox)
[ -x /bin/busybox ] && busybox=/bin/busybox
# Debian's busybox-static is a static binary; a dynamic one would not run in
# the initramfs.
if ldd "$busybox" >/dev/null 2>&1; then
    die "$busybox is dynamically linked; install busybox-static"
fi

# --- kernel package ---------------------------------------------------------
kpat='^linux-image-6\.1\.0-[0-9]+-amd64$'
offered() {
    apt-cache search --names-only "$kpat" 2>/dev/null | awk '{print $1}' |
        sort -V
}
pick_kernels() { # prints candidate package names, best first
    if [ -n "${RDMA_GUEST_KERNEL:-}" ]; then
        echo "linux-image-$RDMA_GUEST_KERNEL"
        return
    fi
    local inst
    inst=$(dpkg-query -W -f='${Package} ${Status}\n' 'linux-image-6.1.0-*-amd64' \
        2>/dev/null | awk '$NF == "installed" {print $1}' | sort -V | tail -n 1)
    if [ -n "$inst" ] && grep -qx "$inst" <<<"$offer"; then
        echo "$inst"
    fi
    # Newest first; two older ones are fallbacks if a download fails.
    sort -rV <<<"$offer" | grep -vx "${inst:-none}" | head -n 3
}
offer=
if [ -z "${RDMA_GUEST_KERNEL:-}" ]; then
    offer=$(offered)
    if [ -z "$offer" ]; then
        apt_update
        offer=$(offered)
    fi
    [ -n "$offer" ] || die "no kernel package linux-image-6.1.0-*-amd64 in the Debian archive (apt-cache search '$kpat' found none)"
fi
candidates=$(pick_kernels)

kdir_complete() { [ -f "$1/.complete" ]; }

kver=
for pkg in $candidates; do
    v=${pkg#linux-image-}
    if kdir_complete "$work/kernel/$v"; then
        kver=$v
        break
    fi
    dl=$work/kernel/download
    rm -rf "$dl" "$work/kernel/$v"
    mkdir -p "$dl"
    sandbox=()
    [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
    echo "rdma guest: downloading $pkg"
    if ! (cd "$dl" && apt-get download -q "${sandbox[@]}" "$pkg") \
        >"$apt_log" 2>&1; then
        apt_update
        if ! (cd "$dl" && apt-get download -q "${sandbox[@]}" "$pkg") \
            >"$apt_log" 2>&1; then
            echo "rdma guest: apt-get download $pkg failed:" >&2
            tail -n 5 "$apt_log" >&2
            continue
        fi
    fi
    deb=$(ls "$dl"/*.deb)
    dpkg-deb -x "$deb" "$work/kernel/$v.tmp" ||
        die "dpkg-deb -x $deb failed"
    rm -rf "$dl"
    [ -f "$work/kernel/$v.tmp/boot/vmlinuz-$v" ] ||
        die "$pkg has no boot/vmlinuz-$v"
    [ -d "$work/kernel/$v.tmp/lib/modules/$v" ] ||
        die "$pkg has no lib/modules/$v"
    # The package ships no modules.dep (its postinst runs depmod).
    smap=()
    [ -f "$work/kernel/$v.tmp/boot/System.map-$v" ] &&
        smap=(-F "$work/kernel/$v.tmp/boot/System.map-$v")
    PATH=$PATH:/usr/sbin:/sbin depmod -b "$work/kernel/$v.tmp" "${smap[@]}" -a "$v" ||
        die "depmod for $v failed"
    mv "$work/kernel/$v.tmp" "$work/kernel/$v"
    touch "$work/kernel/$v/.complete"
    kver=$v
    break
done
[ -n "$kver" ] || die "could not download any of:" $candidates
# Drop kernels of earlier runs (about 400 MB each).
for d in "$work"/kernel/*; do
    [ -d "$d" ] && [ "$d" != "$work/kernel/$kver" ] && rm -rf "$d"
done

kroot=$work/kernel/$kver
kernel=$kroot/boot/vmlinuz-$kver
moddir=$kroot/lib/modules/$kver

# --- initramfs --------------------------------------------------------------
initrd=$work/initramfs-$kver.cpio.gz
stamp=$work/initramfs.stamp
want_stamp=$(cat "$here/setup.sh" "$here/guest-init.sh" "$busybox" |
    sha256sum | cut -d' ' -f1)-$kver
if [ -f "$initrd" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want_stamp" ]; then
    :
else
    # Modules /init loads, in this order; their dependencies come from
    # modules.dep. crc32_generic is no declared dependency of rdma_rxe, but
    # rxe allocates a "crc32" hash: without it "rdma link add" fails with
    # ENOENT. dummy is needed before "ip link add d0 type dummy" (nothing in
    # the guest could auto-load it).
    WANT=(virtio_pci 9pnet_virtio 9p dummy crc32_generic ib_uverbs rdma_rxe)

    declare -A dep_of=() path_of=() builtin=() seen=()
    while IFS= read -r line; do
        key=${line%%:*}
        n=${key##*/}
        n=${n%%.ko*}
        n=${n//-/_}
        path_of[$n]=$key
        dep_of[$n]=${line#*:}
    done <"$moddir/modules.dep"
    while IFS= read -r line; do
        n=${line##*/}
        n=${n%%.ko*}
        builtin[${n//-/_}]=1
    done <"$moddir/modules.builtin"

    order=()
    resolve() {
        local n=$1 d dn
        [ -n "${seen[$n]:-}" ] && return 0
        seen[$n]=1
        [ -n "${builtin[$n]:-}" ] && return 0
        [ -n "${path_of[$n]:-}" ] || die "kernel $kver has no module $n"
        for d in ${dep_of[$n]}; do
            dn=${d##*/}
            dn=${dn%%.ko*}
            resolve "${dn//-/_}"
        done
        order+=("$n")
    }
    for m in "${WANT[@]}"; do
        resolve "$m"
    done

    stage=$(mktemp -d "$work/initramfs.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage"/{bin,sbin,dev,proc,sys,newroot,work,lib/modules}
    cp "$busybox" "$stage/bin/busybox"
    for a in $("$stage/bin/busybox" --list); do
        [ "$a" = busybox ] || ln -s busybox "$stage/bin/$a"
    done
    install -m 755 "$here/guest-init.sh" "$stage/init"
    if [ "$(id -u)" -eq 0 ]; then
        mknod -m 600 "$stage/dev/console" c 5 1
        mknod -m 666 "$stage/dev/null" c 1 3
    fi
    : >"$stage/modules.list"
    for n in "${order[@]}"; do
        src=$moddir/${path_of[$n]}
        dst=$stage/lib/modules/$n.ko
        # busybox insmod may not decompress: unpack compressed modules here.
        case "$src" in
        *.ko) cp "$src" "$dst" ;;
        *.ko.xz) xz -dc "$src" >"$dst" ;;
        *.ko.zst) zstd -qdc "$src" >"$dst" ;;
        *.ko.gz) gzip -dc "$src" >"$dst" ;;
        *) die "unknown module format: $src" ;;
        esac
        echo "$n.ko" >>"$stage/modules.list"
    done
    (cd "$stage" && find . -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$stage"
    trap - EXIT
    for f in "$work"/initramfs-*.cpio.gz; do
        [ "$f" = "$initrd" ] || rm -f "$f"
    done
    echo "$want_stamp" >"$stamp"
fi

# --- what run-in-guest.sh reads -----------------------------------------------
{
    printf 'GUEST_KVER=%q\n' "$kver"
    printf 'GUEST_KERNEL=%q\n' "$kernel"
    printf 'GUEST_INITRD=%q\n' "$initrd"
} >"$work/guest.env.tmp"
if cmp -s "$work/guest.env.tmp" "$work/guest.env"; then
    rm -f "$work/guest.env.tmp"
else
    mv "$work/guest.env.tmp" "$work/guest.env"
fi
