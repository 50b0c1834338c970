#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Real-process convergence benchmark (issue: dynamic P-Reduce): 8 trainers
# on 2 node daemons train softmax regression until the loss on their shard
# reaches a target, under policy allreduce and policy dynamic, on a
# homogeneous profile and with one worker 3x slower. Prints the median
# time-to-target of each run and the ratio against allreduce measured in the
# same run (the anchor), never a pass/fail on time.
#
#   tests/bench/convergence.sh [BUILD_DIR]     (make bench runs it)
set -euo pipefail

BUILD=${1:-build}
PREDUCED=$BUILD/preduced
TRAINER=$BUILD/preduce-trainer
N=${BENCH_WORKERS:-8}
STEP_MS=${BENCH_STEP_MS:-20}
TARGET=${BENCH_TARGET_LOSS:-0.80}
MAX_STEPS=${BENCH_MAX_STEPS:-2000}
WORK=$(mktemp -d /tmp/preduce-bench.XXXXXX)
# shellcheck source=client/examples/cluster.sh
. "$(dirname "$0")/../../client/examples/cluster.sh"
trap 'cluster_stop; rm -rf "$WORK"' EXIT

# Runs one job; prints the median seconds to the target over the workers.
run() { # name policy slow_factor_of_worker0 [scheduler --set ...]
    local dir=$WORK/$1 policy=$2 slow=$3 pids=() w
    shift 3
    cluster_start "$dir" "$policy" 2 "$@" >/dev/null || {
        echo "bench: could not start; logs in $dir" >&2
        exit 1
    }
    for ((w = 0; w < N; w++)); do
        local f=1
        [ $w -eq 0 ] && f=$slow
        "$TRAINER" --socket "$(cluster_socket "$dir" $((w % 2)))" \
            --name w$w --world "$N" --shard $w --steps "$MAX_STEPS" \
            --step-ms "$STEP_MS" --slow "$f" --print-every 100000 \
            --target-loss "$TARGET" --eval-every 5 >"$dir/w$w.out" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    cluster_stop
    sed -n 's/.* reached .* time=\([0-9.]*\)s$/\1/p' "$dir"/w*.out |
        sort -n | awk '{v[NR]=$1} END {
            if (NR == 0) { print "nan"; exit }
            print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'
}

echo "convergence benchmark: $N trainers on 2 daemons, ${STEP_MS} ms steps,"
echo "median time for a worker's shard loss to reach $TARGET"
printf '%-13s %-20s %10s %14s\n' profile policy seconds "vs allreduce"
for profile in homogeneous one-3x-slow; do
    slow=1
    [ $profile = one-3x-slow ] && slow=3
    a=$(run "$profile-allreduce" allreduce $slow)
    d=$(run "$profile-dynamic" dynamic $slow)
    s=$(run "$profile-dynamic-st" dynamic $slow \
        --set scheduler.weighting=staleness)
    printf '%-13s %-20s %10.2f %14s\n' $profile allreduce "$a" "1.00"
    awk -v p=$profile -v a="$a" -v d="$d" -v s="$s" 'BEGIN {
        printf "%-13s %-20s %10.2f %13.2fx\n", p, "dynamic", d, a / d
        printf "%-13s %-20s %10.2f %13.2fx\n", p, "dynamic+staleness", s,
            a / s }'
done
echo "(targets: dynamic >= 1.5x sooner with the straggler; homogeneous no"
echo " later than 1.05x of allreduce, i.e. a ratio >= 0.95)"
