#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# node.socket_group with two real users (root only: it adds them with
# useradd and removes them at the end). A scheduler and a node daemon run
# as root with the socket's group set to a new group; a trainer of a user
# in that group connects and reduces, a trainer of a user outside it is
# refused (EACCES), and the socket file has that group and mode 0660.
# Without root every case is skipped, with the reason. Bounded: every
# daemon and trainer runs under timeout, about 5 s in all.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

BUILD=${BUILD:-build}
PREDUCED=${PREDUCED:-$PWD/$BUILD/preduced}
TRAINER=${PREDUCE_TRAINER:-$PWD/$BUILD/preduce-trainer}

if [ "$(id -u)" -ne 0 ]; then
    skip socket-group "needs root (useradd, setpriv); run as root to test"
    finish
    exit
fi
for tool in useradd groupadd userdel groupdel setpriv; do
    if ! command -v $tool >/dev/null; then
        skip socket-group "$tool missing"
        finish
        exit
    fi
done

. client/examples/cluster.sh
TAG=prt$$
GROUP=${TAG}g
IN=${TAG}in
OUT=${TAG}out
D=$(mktemp -d /tmp/preduce-sockgrp.XXXXXX)
cleanup() {
    cluster_stop
    userdel "$IN" 2>/dev/null
    userdel "$OUT" 2>/dev/null
    groupdel "$GROUP" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT
# The trainers' users must reach the socket in it.
chmod 0755 "$D"

if ! groupadd -r "$GROUP" || ! useradd -r -M -N -s /usr/sbin/nologin \
    -G "$GROUP" "$IN" || ! useradd -r -M -N -s /usr/sbin/nologin "$OUT"; then
    fail users "useradd or groupadd failed"
    finish
    exit
fi

SOCK=$D/node.sock
sport=$(cluster_free_port)
timeout 60 "$PREDUCED" --role scheduler \
    --set scheduler.listen=127.0.0.1:$sport >"$D/sched.log" 2>&1 &
CLUSTER_PIDS+=($!)
cluster_wait "$sport"
timeout 60 "$PREDUCED" --role node --set node.scheduler=127.0.0.1:$sport \
    --set node.socket="$SOCK" --set node.socket_group="$GROUP" \
    --set node.data_listen="127.0.0.1:$(cluster_free_port)" \
    >"$D/node.log" 2>&1 &
CLUSTER_PIDS+=($!)
wait_log "$D/node.log" "trainers connect to"
# Registered with the scheduler before a trainer's 5 s connect timeout
# starts (a node that joined late made that trainer time out once in CI).
wait_log "$D/node.log" "joined job" 30

if [ "$(stat -c '%a %G' "$SOCK")" = "660 $GROUP" ]; then
    pass "socket mode 660, group $GROUP"
else
    fail "socket mode and group" "$(stat -c '%a %U:%G' "$SOCK")"
fi

# A trainer as USER (its own groups from /etc/group): 2 steps, 1 shard.
as_user() {
    timeout 20 setpriv --reuid="$1" --regid="$(id -g "$1")" --init-groups \
        "$TRAINER" --socket "$SOCK" --name "$1" --steps 2 --world 1 \
        --print-every 1 --timeout-ms 5000
}

if out=$(as_user "$IN" 2>&1) && grep -q "done steps=2 " <<<"$out"; then
    pass "a member of $GROUP connects and reduces"
else
    fail "a member of $GROUP connects and reduces" \
        "$out $(tail -n 5 "$D/node.log")"
fi
if out=$(as_user "$OUT" 2>&1); then
    fail "a user outside $GROUP is refused" "the trainer ran: $out"
elif grep -q "Permission denied" <<<"$out"; then
    pass "a user outside $GROUP is refused"
else
    fail "a user outside $GROUP is refused" "not for EACCES: $out"
fi
finish
