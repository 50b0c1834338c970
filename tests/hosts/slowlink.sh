#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench-hosts, the slow-link case: 4 hosts with 2 trainers
# each (client/examples/trainer.c: softmax regression, every worker its
# shard), host 3's link capped at a quarter of the others'. The median
# time for a worker's shard loss to reach the target under allreduce,
# where every group waits for host 3's link, and under dynamic, with the
# ratio against allreduce measured in the same run; ROUNDS rounds
# alternating which policy goes first. Figures, never a pass or fail.
#
#   tests/hosts/slowlink.sh BUILD_DIR [ROUNDS]    (under tests/hosts/run.sh)
#
# The model is small (650 floats), so the caps are low for the link to
# count: 1 Mbit/s, and 256 kbit/s for host 3, with a 4 KiB burst.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
rounds=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
net=$here/net.sh
prefix=${PREDUCE_HOSTS_PREFIX:-prh$$}-$$
work=$(mktemp -d /tmp/preduce-slowlink.XXXXXX)
fast=${SLOWLINK_FAST:-1mbit}
slow=${SLOWLINK_SLOW:-256kbit}
step_ms=${SLOWLINK_STEP_MS:-20}
target=${SLOWLINK_TARGET:-0.80}
pids=()

stop() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
cleanup() {
    stop
    "$net" down "$prefix" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

wait_sock() {
    for _ in $(seq 100); do
        [ -S "$1" ] && return 0
        sleep 0.05
    done
    echo "slowlink: $1 did not come up" >&2
    return 1
}

# One job under policy $1; prints the median seconds to the target.
run() {
    local policy=$1 dir=$work/$1-$2 w i
    mkdir -p "$dir"
    "$net" down "$prefix"
    "$net" up "$prefix" 4
    for i in 0 1 2; do "$net" cap "$prefix" $i "$fast" 4kb; done
    "$net" cap "$prefix" 3 "$slow" 4kb
    ip netns exec "$prefix-h0" "$build/preduced" --role scheduler \
        --set scheduler.listen=10.77.0.1:7070 \
        --set scheduler.policy="$policy" >"$dir/sched.log" 2>&1 &
    pids+=($!)
    sleep 0.2
    for i in 0 1 2 3; do
        ip netns exec "$prefix-h$i" "$build/preduced" --role node \
            --set node.name=host$i --set node.scheduler=10.77.0.1:7070 \
            --set node.data_listen=10.77.0.$((i + 1)):7071 \
            --set node.socket="$dir/node$i.sock" >"$dir/node$i.log" 2>&1 &
        pids+=($!)
        wait_sock "$dir/node$i.sock"
    done
    local tp=()
    for ((w = 0; w < 8; w++)); do
        i=$((w % 4))
        timeout 120 ip netns exec "$prefix-h$i" "$build/preduce-trainer" \
            --socket "$dir/node$i.sock" --name w$w --world 8 --shard $w \
            --steps 3000 --step-ms "$step_ms" --print-every 100000 \
            --target-loss "$target" --eval-every 5 >"$dir/w$w.out" 2>&1 &
        tp+=($!)
    done
    for p in "${tp[@]}"; do wait "$p" || true; done
    stop
    sed -n 's/.* reached .* time=\([0-9.]*\)s$/\1/p' "$dir"/w*.out |
        sort -n | awk '{v[NR]=$1} END {
            if (NR == 0) { print "nan"; exit }
            print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'
}

echo "slow link: 4 hosts x 2 trainers, hosts 0-2 at $fast, host 3 at $slow"
echo "(each way), ${step_ms} ms steps; median seconds for a worker's shard"
echo "loss to reach $target"
printf '%-6s %12s %12s %14s\n' round allreduce dynamic "dynamic speedup"
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
        a=$(run allreduce $r)
        d=$(run dynamic $r)
    else
        d=$(run dynamic $r)
        a=$(run allreduce $r)
    fi
    awk -v r=$r -v a="$a" -v d="$d" 'BEGIN {
        printf "%-6d %12.2f %12.2f %13.2fx\n", r, a, d, a / d }'
done
