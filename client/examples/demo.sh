#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's main job: partial-reduce training on this one machine.
#
# Starts a scheduler, two node daemons and four preduce-trainer processes
# (softmax regression on a synthetic data set), trainer w3 three times
# slower than the others. It trains twice with the same straggler: once with
# policy allreduce (every step waits for w3) and once with policy dynamic
# (fast workers average with whoever is ready), then compares.
#
#   client/examples/demo.sh [BUILD_DIR]      (make demo runs it)
set -euo pipefail

BUILD=${1:-build}
PREDUCED=$BUILD/preduced
TRAINER=$BUILD/preduce-trainer
STEPS=${DEMO_STEPS:-150}
STEP_MS=${DEMO_STEP_MS:-20}
SLOW=${DEMO_SLOW:-3}
WORK=$(mktemp -d /tmp/preduce-demo.XXXXXX)
. "$(dirname "$0")/cluster.sh"

cleanup() {
    cluster_stop
    rm -rf "$WORK"
}
trap cleanup EXIT

run() { # policy
    local policy=$1 dir=$WORK/$1
    # No group before all 4 trainers joined: step 1 already averages all.
    cluster_start "$dir" "$policy" 2 --set scheduler.min_workers=4 ||
        { echo "demo: logs in $dir" >&2; exit 1; }
    local t0 tpids=()
    t0=$(date +%s.%N)
    for w in 0 1 2 3; do
        local slow=1
        [ $w -eq 3 ] && slow=$SLOW
        "$TRAINER" --socket "$(cluster_socket "$dir" $((w % 2)))" --name w$w \
            --world 4 --shard $w --steps "$STEPS" --step-ms "$STEP_MS" \
            --slow $slow --print-every 30 2>&1 |
            while IFS= read -r line; do
                printf '[%-9s] %s\n' "$policy" "$line"
                printf '%s %s\n' "$(date +%s.%N)" "$line" >>"$dir/w$w.out"
            done &
        tpids+=($!)
    done
    for p in "${tpids[@]}"; do wait "$p"; done
    cluster_stop
    # Seconds until the three fast workers were done, and their final loss.
    local fast_end=0 loss
    for w in 0 1 2; do
        local t
        t=$(grep ' done ' "$dir/w$w.out" | awk '{print $1}')
        fast_end=$(awk -v a="$fast_end" -v b="$t" 'BEGIN{print (b>a)?b:a}')
    done
    loss=$(grep -h ' done ' "$dir"/w[012].out |
        sed -n 's/.*loss=\([0-9.]*\).*/\1/p' |
        awk '{s+=$1} END {printf "%.4f", s/NR}')
    awk -v p="$policy" -v t0="$t0" -v t1="$fast_end" -v l="$loss" \
        'BEGIN{printf "%s %.2f %s\n", p, t1-t0, l}' >>"$WORK/summary"
}

echo "preduce demo: 2 node daemons, 4 trainers, w3 is ${SLOW}x slower;"
echo "$STEPS steps of ${STEP_MS} ms simulated compute each."
echo
run allreduce
run dynamic
echo
echo "policy      fast workers' ${STEPS} steps took   their final loss"
while read -r p t l; do
    printf '%-11s %8.2f s                     %s\n' "$p" "$t" "$l"
done <"$WORK/summary"
awk 'NR==1{a=$2} NR==2{d=$2} END{printf "\ndynamic P-Reduce finished %.1fx sooner than all-reduce with the straggler.\n", a/d}' \
    "$WORK/summary"
