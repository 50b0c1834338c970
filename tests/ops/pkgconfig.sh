#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# preduce.pc as a user of an installed libpreduce sees it: `make install
# DESTDIR=... PREFIX=/usr`, then pkg-config with PKG_CONFIG_SYSROOT_DIR
# (the DESTDIR) and PKG_CONFIG_PATH (its pkgconfig directory, ahead of the
# system's, which has libprotobuf-c), then tests/ops/hello.c built with
# nothing but `pkg-config --cflags --libs preduce`, and two of it, run
# against the installed library, reduce with each other through a
# scheduler and a node daemon this script starts: 1 and 2 make 1.5 in a
# group of 2. Root is not needed. Bounded: every process under timeout,
# about 3 s in all.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh
. client/examples/cluster.sh

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
CC=${CC:-cc}
PREDUCED=${PREDUCED:-$PWD/$BUILD/preduced}
T=$(mktemp -d /tmp/preduce-pc.XXXXXX)
trap 'cluster_stop; rm -rf "$T"' EXIT

D=$T/root
if ! $MAKE --no-print-directory -s BUILD="$BUILD" install DESTDIR="$D" \
    PREFIX=/usr >"$T/install.log" 2>&1; then
    fail install "$(tail -n 20 "$T/install.log")"
    finish
    exit
fi

export PKG_CONFIG_SYSROOT_DIR=$D
export PKG_CONFIG_PATH=$D/usr/lib/pkgconfig
# The version preduce.h declares.
want=$(awk '/define PREDUCE_VERSION_MAJOR/ { a = $3 }
    /define PREDUCE_VERSION_MINOR/ { b = $3 } END { print a "." b }' \
    client/include/preduce.h)
flags=$(pkg-config --cflags --libs preduce 2>&1)
if [ $? -eq 0 ] && [ "$(pkg-config --modversion preduce)" = "$want" ] &&
    grep -q -- "-I$D/usr/include" <<<"$flags" &&
    grep -q -- "-L$D/usr/lib -lpreduce" <<<"$flags"; then
    pass "pkg-config --cflags --libs preduce: $flags"
else
    fail "pkg-config --cflags --libs preduce" "$flags"
    finish
    exit
fi

# shellcheck disable=SC2086 # the flags are words
if out=$($CC -std=c11 -Wall -Wextra -Werror -o "$T/hello" tests/ops/hello.c \
    $flags -lm 2>&1); then
    pass "hello.c builds with those flags"
else
    fail "hello.c builds with those flags" "$out"
    finish
    exit
fi
# The installed library, not the build tree's: no rpath, so say where.
export LD_LIBRARY_PATH=$D/usr/lib
# ldd's output taken whole first: grep -q stops reading at its match, and
# under pipefail an ldd killed by SIGPIPE failed the case now and then.
libs=$(ldd "$T/hello")
if grep -q "libpreduce.so.1 => $D/usr/lib/" <<<"$libs"; then
    pass "hello links the installed libpreduce.so.1"
else
    fail "hello links the installed libpreduce.so.1" "$libs"
fi

SOCK=$T/node.sock
sport=$(cluster_free_port)
timeout 60 "$PREDUCED" --role scheduler \
    --set scheduler.listen=127.0.0.1:$sport \
    --set scheduler.min_workers=2 >"$T/sched.log" 2>&1 &
CLUSTER_PIDS+=($!)
cluster_wait "$sport"
timeout 60 "$PREDUCED" --role node --set node.scheduler=127.0.0.1:$sport \
    --set node.socket="$SOCK" \
    --set node.data_listen="127.0.0.1:$(cluster_free_port)" \
    >"$T/node.log" 2>&1 &
CLUSTER_PIDS+=($!)
wait_log "$T/node.log" "trainers connect to"

declare -A pids
timeout 30 "$T/hello" "$SOCK" w0 1 1.5 2 >"$T/w0.out" 2>&1 &
pids[w0]=$!
timeout 30 "$T/hello" "$SOCK" w1 2 1.5 2 >"$T/w1.out" 2>&1 &
pids[w1]=$!
for w in w0 w1; do
    pid=${pids[$w]}
    if wait "$pid"; then
        pass "$(cat "$T/$w.out")"
    else
        fail "$w reduces to 1.5 in a group of 2" \
            "$(cat "$T/$w.out"; tail -n 5 "$T/node.log")"
    fi
done
finish
