#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Soft-RoCE smoke test. Runs inside the guest:
#   tests/rdma/run-in-guest.sh tests/rdma/smoke.sh
# Lists the verbs devices, then runs an RC write bandwidth test and an RC
# ping-pong between two processes on rxe0 (queue pairs loop back inside rxe).
# Emulated CPUs are slow: compare figures only with other runs in the guest.
set -euo pipefail

[ "${PREDUCE_RDMA_GUEST:-}" = 1 ] || {
    echo "smoke.sh: runs inside the guest: tests/rdma/run-in-guest.sh $0" >&2
    exit 2
}
dev=$PREDUCE_RDMA_DEV
addr=$PREDUCE_RDMA_ADDR
gidx=$PREDUCE_RDMA_GID_INDEX
out=$PREDUCE_RDMA_OUT
port=18515

# Waits until something listens on TCP port $1 (perftest and the pingpong
# exchange queue pair numbers over TCP before the RDMA traffic).
wait_listen() {
    for _ in $(seq 100); do
        ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "smoke: nothing listens on port $1 after 10 s" >&2
    return 1
}

# Runs a server in the background and its client against it; both bounded.
server_client() {
    local name=$1
    shift
    timeout 60 "$@" >"$out/$name-server.log" 2>&1 &
    local spid=$!
    wait_listen "$port" || { kill "$spid" 2>/dev/null; return 1; }
    local crc=0 src=0
    timeout 60 "$@" "$addr" 2>&1 | tee "$out/$name-client.log" || crc=$?
    wait "$spid" || src=$?
    if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
        echo "smoke: $name failed (client $crc, server $src); server said:" >&2
        cat "$out/$name-server.log" >&2
        return 1
    fi
}

echo "== ibv_devices"
ibv_devices
echo "== ibv_devinfo -d $dev"
ibv_devinfo -d "$dev"

echo "== ib_write_bw -d $dev -x $gidx -s 1048576 -n 200 (RC, loopback on $dev)"
server_client ib_write_bw ib_write_bw -d "$dev" -x "$gidx" -s 1048576 -n 200 \
    -p "$port" -F
bw=$(awk '$1 == 1048576 && NF >= 5 {print $4}' "$out/ib_write_bw-client.log" |
    tail -n 1)
[ -n "$bw" ] || {
    echo "smoke: no bandwidth figure in ib_write_bw's output" >&2
    exit 1
}
echo "smoke: ib_write_bw on $dev: average $bw MB/s (1 MiB messages, 200 iterations)"

echo "== ibv_rc_pingpong -d $dev -g $gidx (RC, 64 KiB, 500 iterations)"
server_client ibv_rc_pingpong ibv_rc_pingpong -d "$dev" -g "$gidx" -s 65536 \
    -n 500 -p "$port"

echo "ib_write_bw_MBps=$bw" >"$out/smoke.result"
echo "smoke: OK"
