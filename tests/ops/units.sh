#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The systemd units and the sysusers file as `make install` writes them:
# an install into a scratch tree (every directory under it, so the units
# name binaries that exist), then for each unit `systemd-analyze verify`
# (no output allowed; the man pages in Documentation= must be installed
# and found) and `systemd-analyze security --offline=yes`, whose exposure
# is printed and must be at most MAX_EXPOSURE; then systemd-sysusers
# creates the service user in the scratch tree. Root is not needed. Needs
# the systemd package (tests/install-deps.sh). Bounded: about 5 s.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

MAX_EXPOSURE=3.5
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
T=$(mktemp -d /tmp/preduce-units.XXXXXX)
trap 'rm -rf "$T"' EXIT

if ! command -v systemd-analyze >/dev/null; then
    skip units "systemd-analyze missing (apt-get install systemd)"
    finish
    exit
fi

if ! $MAKE --no-print-directory -s BUILD="$BUILD" install PREFIX="$T/usr" \
    SYSCONFDIR="$T/etc" UNITDIR="$T/lib/systemd/system" \
    SYSUSERSDIR="$T/usr/lib/sysusers.d" >"$T/install.log" 2>&1; then
    fail install "$(tail -n 20 "$T/install.log")"
    finish
    exit
fi
pass install

# Documentation= names man pages: verify runs man(1), which finds them
# under the scratch tree through MANPATH.
export MANPATH="$T/usr/share/man"
for u in preduced.service preduced-scheduler.service; do
    f="$T/lib/systemd/system/$u"
    if [ ! -f "$f" ]; then
        fail "$u installed" "no $f"
        continue
    fi
    out=$(timeout 30 systemd-analyze verify "$f" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && [ -z "$out" ]; then
        pass "verify $u"
    else
        fail "verify $u" "exit $rc: $out"
    fi
    line=$(timeout 30 systemd-analyze security --offline=yes "$f" 2>&1 |
        grep "Overall exposure level")
    fig=$(sed -n 's/.*: \([0-9.]*\) .*/\1/p' <<<"$line")
    echo "exposure: $u: ${fig:-?} (at most $MAX_EXPOSURE)"
    if [ -n "$fig" ] && awk -v f="$fig" -v m="$MAX_EXPOSURE" \
        'BEGIN { exit !(f <= m) }'; then
        pass "exposure $u"
    else
        fail "exposure $u" "${line:-no figure}"
    fi
done

# The service user and group, made by systemd-sysusers in the scratch root.
if timeout 30 systemd-sysusers --root="$T" \
    "$T/usr/lib/sysusers.d/preduce.conf" >"$T/sysusers.log" 2>&1 &&
    grep -q '^preduce:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' \
        "$T/etc/passwd" && grep -q '^preduce:x:' "$T/etc/group"; then
    pass "sysusers preduce"
else
    fail "sysusers preduce" "$(cat "$T/sysusers.log" "$T/etc/passwd" 2>&1)"
fi
finish
