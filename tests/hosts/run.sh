#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-hosts: runs each multi-host suite (a Check binary, or any
# program with its arguments as one word) given on the command line, with
# PREDUCE_HOSTS_PREFIX naming its namespaces prh<this shell's pid>-<test's
# pid>-*. Whatever way this script ends (a suite fails, times out, ^C,
# SIGTERM), the trap kills what still runs in the namespaces of that
# prefix (a delay relay, a daemon) and deletes them (net.sh down);
# namespaces left by a run that was SIGKILLed (prh<pid> of a process that
# no longer exists) are cleared the same way first.
#
# Skipped, saying so, where network namespaces cannot be made (not root,
# no ip); under CI (CI set) that fails instead, so that a machine short
# of a package never passes without running the suites. Each suite is
# bounded by HOSTS_SUITE_TIMEOUT seconds (240).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
net=$here/net.sh
prefix=prh$$

# The suite running now (its timeout's pid; timeout leads a process group
# of its own and passes a signal on to all of it).
suite=

cleanup() {
    if [ -n "$suite" ]; then
        kill -TERM "$suite" 2>/dev/null || true
        wait "$suite" 2>/dev/null || true
        suite=
    fi
    "$net" down "$prefix" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Says why the suites cannot run: a skip, or under CI a failure.
skip() {
    if [ -n "${CI:-}" ]; then
        echo "check-hosts: FAILED (CI is set, nothing may be skipped): $*"
        exit 1
    fi
    echo "check-hosts: SKIPPED: $*"
    exit 0
}

if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    skip "ip and tc (iproute2) are not installed (tests/install-deps.sh)"
fi
if ! err=$(ip netns add "$prefix-probe" 2>&1); then
    skip "cannot create network namespaces (needs root): $err"
fi
ip netns del "$prefix-probe"

# Leftovers of runs that could not clean up (SIGKILL).
for ns in $(ip netns list | awk '{print $1}'); do
    case $ns in
    prh[0-9]*-*)
        pid=${ns#prh}
        pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null || "$net" down "prh$pid" 2>/dev/null || true
        ;;
    esac
done

export PREDUCE_HOSTS_PREFIX=$prefix PREDUCE_HOSTS_NET=$net
status=0
for t in "$@"; do
    echo "== $t"
    # Unquoted: an argument may be a program with its arguments. In the
    # background, so that a signal to this script runs its trap at once
    # (bash holds traps while a foreground command runs).
    # shellcheck disable=SC2086
    timeout -k 5 "${HOSTS_SUITE_TIMEOUT:-240}" $t &
    suite=$!
    wait "$suite"
    rc=$?
    suite=
    if [ $rc -ne 0 ]; then
        [ $rc -eq 124 ] && echo "check-hosts: $t timed out"
        status=1
    fi
    cleanup
done
exit $status
