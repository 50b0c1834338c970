#!/usr/bin/env bash
# `make check-rdma`, inside the Soft-RoCE guest (tests/rdma/run-in-guest.sh):
#  1. the multi-daemon integration tests with transport = rdma
#     (build/tests/itest_rdma: 3 daemons, 6 trainers, allreduce and
#     constant, sizes 1, 1000003, 4194304, 20 steps; a peer killed
#     mid-transfer), which also check that data bytes went over RDMA only;
#  2. the all-reduce bandwidth of 2 daemons over rxe0 next to ib_write_bw on
#     the same rxe0 in the same guest, as a ratio (target >= 0.8 at 1 MiB).
# On a machine with a real RDMA device, run the same binaries directly.
set -euo pipefail

[ "${PREDUCE_RDMA_GUEST:-}" = 1 ] || {
    echo "check.sh: runs inside the guest: tests/rdma/run-in-guest.sh $0" >&2
    exit 2
}
dev=$PREDUCE_RDMA_DEV
addr=$PREDUCE_RDMA_ADDR
gidx=$PREDUCE_RDMA_GID_INDEX
out=$PREDUCE_RDMA_OUT
build=${PREDUCE_BUILD:-$PWD/build}
export PREDUCED=$build/preduced PREDUCE_BUILD=$build
export PREDUCE_TEST_NODE_SETS="transport.type=rdma transport.rdma_device=$dev transport.gid_index=$gidx"

echo "== integration tests over $dev"
"$build/tests/itest_rdma"

# ib_write_bw [-b]: its average MB/s at 1 MiB messages, one RC stream
# (with -b, both directions at once: the all-reduce's traffic pattern, and
# the figure is then the sum of both directions).
ib_bw() {
    local port=18515
    timeout 60 ib_write_bw -d "$dev" -x "$gidx" -s 1048576 -n 200 -p $port \
        -F "$@" >"$out/bw-server.log" 2>&1 &
    local spid=$!
    for _ in $(seq 100); do
        ss -Hltn "sport = :$port" | grep -q . && break
        sleep 0.1
    done
    timeout 60 ib_write_bw -d "$dev" -x "$gidx" -s 1048576 -n 200 -p $port \
        -F "$@" "$addr" >"$out/bw-client.log" 2>&1
    wait "$spid"
    awk '$1 == 1048576 && NF >= 5 {print $4}' "$out/bw-client.log" | tail -n 1
}

echo "== ib_write_bw -d $dev -x $gidx -s 1048576 -n 200"
uni=$(ib_bw)
bi=$(ib_bw -b)
echo "ib_write_bw: $uni MB/s one way; with -b $bi MB/s both ways together"

echo "== preduce all-reduce of 2 daemons over $dev"
BENCH_RUN_S=${BENCH_RUN_S:-8} "$build/bench/bench_allreduce" 1 16 |
    tee "$out/allreduce.log"
# Each daemon sends its bus bandwidth while the other does the same, like
# ib_write_bw -b; the one-way figure is the stricter anchor.
awk -v uni="$uni" -v bi="$bi" '/bus bandwidth/ {
        for (i = 1; i <= NF; i++) if ($i == "bandwidth") bw = $(i + 1)
        printf "ratio at %s MiB: %.2f of ib_write_bw one way, %.2f of its " \
               "per-direction rate with -b (target >= 0.80)\n",
               $4, bw / uni, bw / (bi / 2) }' "$out/allreduce.log"
