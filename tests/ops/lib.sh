# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by the tests/ops/*.sh suites: cases counted as they run, and
# Check's closing line at the end ("100%: Checks: N, Failures: F, Errors:
# 0"), which CI reads. A case that cannot run here is skipped with its
# reason printed and is not counted.
#
#   pass NAME            a case that held
#   fail NAME WHY        a case that did not (the suite exits 1 at the end)
#   skip NAME WHY        a case not run
#   check NAME CMD...    pass if CMD succeeds, else fail with its output
#   finish               the summary line; exit status 1 on any failure
#   wait_log FILE TEXT   waits up to 5 s for TEXT in FILE

OPS_CHECKS=0
OPS_FAILS=0

pass() { OPS_CHECKS=$((OPS_CHECKS + 1)); echo "ok: $1"; }

fail() {
    OPS_CHECKS=$((OPS_CHECKS + 1))
    OPS_FAILS=$((OPS_FAILS + 1))
    echo "FAIL: $1: $2"
}

# A check that cannot run here says why; under CI (CI set) that is a
# failure, so that a machine short of a package or of root never passes
# without running it.
skip() {
    if [ -n "${CI:-}" ]; then
        fail "$1" "cannot run here, and CI is set: $2"
    else
        echo "skipped: $1: $2"
    fi
}

check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}

finish() {
    local pct=100
    [ "$OPS_CHECKS" -gt 0 ] &&
        pct=$(((OPS_CHECKS - OPS_FAILS) * 100 / OPS_CHECKS))
    echo "$pct%: Checks: $OPS_CHECKS, Failures: $OPS_FAILS, Errors: 0"
    [ "$OPS_FAILS" -eq 0 ]
}

# A node daemon's socket file exists from its bind, a moment before it
# listens: wait for the line it logs once it does.
# wait_log FILE TEXT [SECONDS]: up to SECONDS (5).
wait_log() {
    local s=${3:-5}
    for _ in $(seq $((s * 20))); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "no \"$2\" in $1 within $s s" >&2
    return 1
}

# A systemd container on an overlay of / for the tests that install
# preduce into one (tests/ops/nspawn.sh, tests/deb/check.sh). All take the
# test's scratch directory T; the container is T/merged.
#
#   ct_overlay T SIZE    tmpfs of SIZE for the upper layer (not inside the
#                        lower one), / overlaid at T/merged; 1 if a mount
#                        failed
#   ct_boot T NAME       boots it (systemd.unit=basic.target, no network,
#                        no host systemd asked: PID 1 may be none); sets
#                        CT_NSPAWN and CT_INIT (the container's systemd, for
#                        nsenter -t); 1 (log in T/nspawn.log) if it did not
#                        reach basic.target within 60 s
#   ct_enter S CMD...    CMD in the container, bounded at S seconds: its
#                        namespaces, and its root and working directory
#                        taken from its init (-r -w): in a chroot the mount
#                        namespace's root is the machine's /, not the
#                        container's, so entering the namespaces alone would
#                        run CMD on the host's files
#   ct_stop T            SIGTERM (nspawn shuts the container down in order),
#                        SIGKILL after 10 s, then the mounts and T removed
CT_NSPAWN=
CT_INIT=

ct_overlay() {
    mkdir -p "$1/ovl" "$1/merged" &&
        mount -t tmpfs -o "size=$2" tmpfs "$1/ovl" &&
        mkdir -p "$1/ovl/upper" "$1/ovl/work" &&
        mount -t overlay overlay \
            -o "lowerdir=/,upperdir=$1/ovl/upper,workdir=$1/ovl/work" \
            "$1/merged"
}

ct_boot() {
    timeout 300 systemd-nspawn -q -D "$1/merged" -M "$2" --register=no \
        --keep-unit --private-network --boot -- systemd.unit=basic.target \
        >"$1/nspawn.log" 2>&1 </dev/null &
    CT_NSPAWN=$!
    local leader
    for _ in $(seq 600); do
        leader=$(pgrep -P "$CT_NSPAWN" | head -1)
        [ -n "$leader" ] && CT_INIT=$(pgrep -P "$leader" -x systemd | head -1)
        if [ -n "$CT_INIT" ] &&
            ct_enter 5 systemctl is-active -q basic.target 2>/dev/null; then
            return 0
        fi
        CT_INIT=
        sleep 0.1
    done
    return 1
}

ct_enter() {
    local s=$1
    shift
    timeout "$s" nsenter -t "$CT_INIT" -a -r -w "$@"
}

ct_stop() {
    if [ -n "$CT_NSPAWN" ]; then
        kill -TERM "$CT_NSPAWN" 2>/dev/null
        for _ in $(seq 100); do
            kill -0 "$CT_NSPAWN" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$CT_NSPAWN" 2>/dev/null
        wait "$CT_NSPAWN" 2>/dev/null
    fi
    umount "$1/merged" 2>/dev/null
    umount "$1/ovl" 2>/dev/null
    rm -rf "$1"
}
