#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The installed units run under a real systemd (root only): this
# machine's OS tree as an overlay (writes go to a tmpfs), booted with
# systemd-nspawn to basic.target on a private network, with `make install
# DESTDIR=... PREFIX=/usr` copied in. Inside: systemd-sysusers made the
# user preduce at boot; both units start with their sandbox and a cluster
# key owned by preduce (mode 600), as user preduce with no capabilities
# and a seccomp filter; a trainer of a user in group preduce reduces 20
# times over its memfd tensors, another user's is refused; preducectl
# reads both metrics ports; with WatchdogSec=2 (a drop-in) both stay up
# for 6 s without a restart, so the pings come; a reload works. No RDMA
# device here: that path of the sandbox (DeviceAllow, AF_NETLINK, memlock)
# is not exercised. Skipped, saying why, without root or systemd-nspawn
# (systemd-container). Bounded: boot within 60 s, every command under
# timeout; about 30 s in all.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}

if [ "$(id -u)" -ne 0 ]; then
    skip nspawn "needs root (mounts, systemd-nspawn); run as root to test"
    finish
    exit
fi
if ! command -v systemd-nspawn >/dev/null; then
    skip nspawn "systemd-nspawn missing (apt-get install systemd-container)"
    finish
    exit
fi

T=$(mktemp -d /tmp/preduce-nspawn.XXXXXX)
cleanup() { ct_stop "$T"; }
trap cleanup EXIT

if ! $MAKE --no-print-directory -s BUILD="$BUILD" install DESTDIR="$T/root" \
    PREFIX=/usr >"$T/install.log" 2>&1; then
    fail install "$(tail -n 20 "$T/install.log")"
    finish
    exit
fi

# An overlay of / (the upper layer on a tmpfs of its own: not inside the
# lower one), with the install on top. /lib may be a link to usr/lib.
if ! ct_overlay "$T" 512m; then
    fail "overlay of /" "mount failed"
    finish
    exit
fi
M=$T/merged
cp -a "$T/root/usr/." "$M/usr/" && cp -a "$T/root/etc/." "$M/etc/" &&
    cp "$T/root/lib/systemd/system/"*.service "$M/lib/systemd/system/"

# The test's configuration: a key, metrics on, a 2 s watchdog.
cat >"$M/etc/preduce/preduced.conf" <<'CONF'
[security]
key_file = /etc/preduce/cluster.key
[metrics]
listen = 127.0.0.1:9464
CONF
head -c 32 /dev/urandom >"$M/etc/preduce/cluster.key"
chmod 600 "$M/etc/preduce/cluster.key"
mkdir -p "$M/etc/systemd/system/preduced.service.d" \
    "$M/etc/systemd/system/preduced-scheduler.service.d"
printf '[Service]\nWatchdogSec=2\n' \
    >"$M/etc/systemd/system/preduced.service.d/test.conf"
printf '[Service]\nWatchdogSec=2\nExecStart=\nExecStart=%s\n' \
    "/usr/bin/preduced -c /etc/preduce/preduced.conf --role scheduler --set metrics.listen=127.0.0.1:9465" \
    >"$M/etc/systemd/system/preduced-scheduler.service.d/test.conf"

# The container (ct_boot, tests/ops/lib.sh).
if ! ct_boot "$T" "prt$$"; then
    fail "the container boots" "$(tail -n 30 "$T/nspawn.log")"
    finish
    exit
fi
pass "a systemd container boots (basic.target)"
ct() { ct_enter 30 "$@"; }

if ct getent passwd preduce | grep -q ':/usr/sbin/nologin$'; then
    pass "systemd-sysusers made user preduce at boot"
else
    fail "user preduce" "$(ct getent passwd preduce)"
fi
ct chown preduce:preduce /etc/preduce/cluster.key
if ct systemctl start preduced-scheduler preduced &&
    ct systemctl is-active -q preduced-scheduler preduced; then
    pass "both units start"
else
    fail "both units start" "$(ct journalctl --no-pager -n 30 \
        -u preduced -u preduced-scheduler)"
fi
pid=$(ct systemctl show -p MainPID --value preduced)
st=$(ct cat "/proc/$pid/status")
if [ "$(ct ps -o user=,group= -p "$pid" | tr -s ' ')" = "preduce preduce" ] &&
    grep -q '^CapEff:[[:space:]]*0000000000000000$' <<<"$st" &&
    grep -q '^CapBnd:[[:space:]]*0000000000000000$' <<<"$st" &&
    grep -q '^Seccomp:[[:space:]]*2$' <<<"$st" &&
    grep -q '^NoNewPrivs:[[:space:]]*1$' <<<"$st"; then
    pass "the node runs as preduce, no capabilities, seccomp filter"
else
    fail "the node's credentials" "$(ct ps -o user,group -p "$pid"; echo "$st")"
fi

ct useradd -M -N -s /usr/sbin/nologin -G preduce alice
ct useradd -M -N -s /usr/sbin/nologin bob
trainer() {
    ct setpriv --reuid="$1" --regid=users --init-groups \
        /usr/bin/preduce-trainer --socket /run/preduce/preduced.sock \
        --name "$1" --world 1 --steps 20 --timeout-ms 5000 2>&1
}
if out=$(trainer alice) && grep -q "done steps=20 " <<<"$out"; then
    pass "alice (group preduce) reduces 20 times"
else
    fail "alice reduces" "$out $(ct journalctl --no-pager -n 20 -u preduced)"
fi
if out=$(trainer bob); then
    fail "bob (not in group preduce) is refused" "it ran: $out"
elif grep -q "Permission denied" <<<"$out"; then
    pass "bob (not in group preduce) is refused"
else
    fail "bob is refused" "not for EACCES: $out"
fi
if out=$(ct /usr/bin/preducectl status --metrics 127.0.0.1:9464 \
    --metrics 127.0.0.1:9465) && grep -q "20 ok" <<<"$out" &&
    grep -q "20 formed" <<<"$out"; then
    pass "preducectl reads both metrics ports"
else
    fail "preducectl status" "$out"
fi
sleep 6
show=$(ct systemctl show -p ActiveState -p NRestarts preduced \
    preduced-scheduler)
if [ "$(grep -c '^ActiveState=active$' <<<"$show")" -eq 2 ] &&
    [ "$(grep -c '^NRestarts=0$' <<<"$show")" -eq 2 ]; then
    pass "WatchdogSec=2: both up after 6 s, no restart"
else
    fail "watchdog" "$show"
fi
if ct systemctl reload preduced && sleep 0.5 &&
    ct journalctl --no-pager -u preduced | grep -q "reloaded /etc/preduce"; then
    pass "systemctl reload preduced"
else
    fail "reload" "$(ct journalctl --no-pager -n 10 -u preduced)"
fi
finish
