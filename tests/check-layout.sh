#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-layout: the daemon's parts depend one way. Fails, naming the
# file, line and rule, when
#  - a private header (*_int.h) is included from outside its folder;
#  - a part includes a header of a part above it, or of another part of
#    its own rank (the order below);
#  - the scheduler core includes libuv, or from base anything but the
#    vocabulary it shares with the config (names.h, policy.h): it decides,
#    the server around it configures and runs it;
#  - a transport includes the engine's engine.h (it hands chunks and link
#    loss to the engine through the link contract's callbacks, xport.h);
#  - the client library includes a daemon header.
# Tests are exempt (unit tests reach into private headers on purpose).
#
# The parts, lowest first (a part may include its own folder and any
# lower part; proto/ and system headers are open to all):
#   0 daemon/base        config, log, framed connections, auth, metrics
#   1 daemon/sched/core  the scheduler's decisions: no I/O, no clock
#   2 daemon/engine      a group's ring all-reduce and its maths; xport.h
#   3 daemon/xport/rdma  verbs
#   4 daemon/xport/tcp   peer links (carrying RDMA's set-up)
#   5 daemon/node, daemon/sched   the two roles
#   6 daemon (main.c), daemon/sim, daemon/ctl   the programs
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2

rank() {
    case "$1" in
    daemon/base) echo 0 ;;
    daemon/sched/core) echo 1 ;;
    daemon/engine) echo 2 ;;
    daemon/xport/rdma) echo 3 ;;
    daemon/xport/tcp) echo 4 ;;
    daemon/node | daemon/sched) echo 5 ;;
    daemon | daemon/sim | daemon/ctl) echo 6 ;;
    *) echo "" ;;
    esac
}

bad=0
fail() {
    echo "check-layout: $1: $2" >&2
    bad=$((bad + 1))
}

files=$(find daemon client -name '*.[ch]' | sort)
for f in $files; do
    dir=$(dirname "$f")
    r=$(rank "$dir")
    case "$dir" in
    daemon*) [ -n "$r" ] || fail "$f" "folder $dir has no rank in tests/check-layout.sh" ;;
    esac
    while IFS=: read -r line inc; do
        hdr=$(sed -E 's/^#include [<"]([^">]+)[">].*/\1/' <<<"$inc")
        hdir=$(dirname "$hdr")
        case "$hdr" in
        daemon/*)
            if [[ "$dir" == client* ]]; then
                fail "$f:$line" "the client library includes $hdr"
                continue
            fi
            if [[ "$hdr" == *_int.h && "$hdir" != "$dir" ]]; then
                fail "$f:$line" "private header $hdr included outside $hdir"
            fi
            hr=$(rank "$hdir")
            if [ -z "$hr" ]; then
                fail "$f:$line" "$hdr is in no known part"
            elif [ "$hdir" != "$dir" ] && [ -n "$r" ] && [ "$hr" -ge "$r" ]; then
                fail "$f:$line" "$dir (rank $r) includes $hdr (rank $hr)"
            fi
            if [[ "$dir" == daemon/xport/* && "$hdr" == daemon/engine/engine.h ]]; then
                fail "$f:$line" "a transport includes the engine ($hdr): use xport.h's callbacks"
            fi
            if [[ "$dir" == daemon/sched/core && "$hdr" == daemon/base/* &&
                "$hdr" != daemon/base/names.h && "$hdr" != daemon/base/policy.h ]]; then
                fail "$f:$line" "the scheduler core includes $hdr (of base, only names.h and policy.h)"
            fi
            ;;
        uv.h)
            if [[ "$dir" == daemon/sched/core ]]; then
                fail "$f:$line" "the scheduler core includes libuv"
            fi
            ;;
        esac
    done < <(grep -n '^#include' "$f" | sed -E 's/^([0-9]+):/\1:/')
done

if [ "$bad" -gt 0 ]; then
    echo "check-layout: $bad violation(s)" >&2
    exit 1
fi
echo "check-layout: $(wc -w <<<"$files") files, the parts depend one way"
