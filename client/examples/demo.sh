#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's main job: partial-reduce training on this one machine.
#
# Starts a scheduler, two node daemons and four preduce-trainer processes
# (softmax regression on a synthetic data set), trainer w3 three times
# slower than the others. It trains twice with the same straggler: once with
# policy allreduce (every step waits for w3) and once with policy dynamic
# (fast workers average with whoever is ready). Each worker stops when the
# loss on its shard reaches DEMO_TARGET (0.66), as bench-torch measures
# time to a target; the demo prints when the median worker and every
# worker got there under each policy, and the ratio.
#
#   client/examples/demo.sh [BUILD_DIR]      (make demo runs it)
set -euo pipefail

BUILD=${1:-build}
PREDUCED=$BUILD/preduced
TRAINER=$BUILD/preduce-trainer
TARGET=${DEMO_TARGET:-0.66}
MAX_STEPS=${DEMO_MAX_STEPS:-2000} # a worker that never gets there stops
STEP_MS=${DEMO_STEP_MS:-20}
SLOW=${DEMO_SLOW:-3}
WORK=$(mktemp -d /tmp/preduce-demo.XXXXXX)
# shellcheck source=client/examples/cluster.sh
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
            --world 4 --shard $w --steps "$MAX_STEPS" --step-ms "$STEP_MS" \
            --slow $slow --print-every 30 --target-loss "$TARGET" \
            --eval-every 5 2>&1 |
            while IFS= read -r line; do
                printf '[%-9s] %s\n' "$policy" "$line"
                printf '%s %s\n' "$(date +%s.%N)" "$line" >>"$dir/w$w.out"
            done &
        tpids+=($!)
    done
    for p in "${tpids[@]}"; do wait "$p"; done
    cluster_stop
    # Seconds until the three fast workers were done, and their final loss.
    # When each worker reached the target, seconds from the common start
    # (its "reached" line's arrival); "-" for one that stopped short.
    local w t times=()
    for w in 0 1 2 3; do
        t=$(awk -v t0="$t0" '/ reached loss=/ {printf "%.2f", $1 - t0}' \
            "$dir/w$w.out")
        times+=("${t:--}")
    done
    printf '%s %s\n' "$policy" "${times[*]}" >>"$WORK/summary"
}

# median and max of the workers' times, or "-" when one did not get there
stats() {
    printf '%s\n' "$@" | sort -g | awk '
        $1 == "-" { miss = 1 } { v[NR] = $1 }
        END { if (miss) { print "- -"; exit }
              printf "%.2f %.2f\n", (v[2] + v[3]) / 2, v[NR] }'
}

echo "preduce demo: 2 node daemons, 4 trainers, w3 is ${SLOW}x slower;"
echo "steps of ${STEP_MS} ms simulated compute; each worker stops when the"
echo "loss on its shard is at most $TARGET."
echo
run allreduce
run dynamic
echo
echo "time to loss <= $TARGET   median worker   every worker"
declare -A MED ALL
while read -r p times; do
    # shellcheck disable=SC2086 # the four times, one word each
    read -r MED[$p] ALL[$p] < <(stats $times)
    printf '%-22s %10s s %12s s\n' "$p" "${MED[$p]}" "${ALL[$p]}"
done <"$WORK/summary"
if [[ ${MED[dynamic]} != - && ${MED[allreduce]} != - &&
    ${ALL[dynamic]} != - && ${ALL[allreduce]} != - ]]; then
    awk -v am="${MED[allreduce]}" -v dm="${MED[dynamic]}" \
        -v aa="${ALL[allreduce]}" -v da="${ALL[dynamic]}" -v t="$TARGET" \
        'BEGIN { printf "\ndynamic P-Reduce reached loss %s %.1fx sooner than " \
            "all-reduce for the median worker, %.1fx for every worker.\n", \
            t, am / dm, aa / da }'
else
    echo "a policy did not reach the target in $MAX_STEPS steps"
fi
