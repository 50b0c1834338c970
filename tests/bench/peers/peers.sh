#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# preduce's all-reduce next to MPI's and Gloo's on this machine, over TCP on
# 127.0.0.1 for all three (`make bench-peers`):
#   - preduce: build/bench/bench_allreduce (2 node daemons, 1 trainer each,
#     policy allreduce; tensors unchanged on error, and in place);
#   - MPI: Open MPI's MPI_Allreduce, 2 ranks, --mca btl tcp,self, one core
#     each;
#   - Gloo: AllreduceRingChunked, 2 processes, its TCP transport.
# All print the bus bandwidth of 2 workers (tensor bytes per all-reduce over
# the time of one) and check their results. This machine's speed drifts
# (a shared host: the same run may take half again as long a minute
# later), so the three take turns in short runs, one tensor size at a
# time, for PREDUCE_PEERS_ROUNDS rounds (default 7) of
# PREDUCE_PEERS_RUN_S seconds each (default 2): each ratio is taken within
# a round, between runs seconds apart, and the summary gives the median
# ratio over the rounds with its range, next to the median MB/s.
#   peers.sh [MiB ...]     tensor sizes (default: 1 16)
set -euo pipefail

build=${PREDUCE_BUILD:-$PWD/build}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1 16)
rounds=${PREDUCE_PEERS_ROUNDS:-7}
export BENCH_RUN_S=${PREDUCE_PEERS_RUN_S:-2}
out=$(mktemp -d /tmp/preduce-peers.XXXXXX)
trap 'rm -rf "$out"' EXIT
# Open MPI refuses root unless told, and would use shared memory on one
# machine: TCP over loopback, like the daemons' links here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each worker plays a host with one core: MPI's ranks bound to a core each,
# and each node daemon with its trainer on a CPU of its own (the harness's
# PREDUCE_TEST_PIN_CPUS; the daemon's reduce threads follow its CPUs), so
# neither side's processes or threads contend for the other's core.
mpi=(mpirun -n 2 --oversubscribe --bind-to core --mca btl "tcp,self"
    --mca btl_tcp_if_include lo)
export PREDUCE_TEST_PIN_CPUS=1

# "name MiB bus-bandwidth round" lines from a run's output.
collect() {
    awk -v who="$1" -v round="$2" '/bus bandwidth/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "bandwidth") bw = $(i + 1)
            if ($i == "MiB") mib = $(i - 1)
        }
        print who ($0 ~ / in place/ ? "-in-place" : ""), mib, bw, round
    }'
}

nproc=$(nproc)
echo "== $nproc CPUs; TCP over 127.0.0.1 for all; $BENCH_RUN_S s per run," \
    "$rounds rounds"
for r in $(seq "$rounds"); do
    echo "== round $r of $rounds"
    for mib in "${sizes[@]}"; do
        "$build/bench/bench_allreduce" "$mib" | tee "$out/p.txt" |
            grep -v '^  cpu'
        collect preduce "$r" <"$out/p.txt" >>"$out/all.txt"
        timeout 300 "${mpi[@]}" "$build/bench/mpi_allreduce" "$mib" |
            tee "$out/m.txt"
        collect mpi "$r" <"$out/m.txt" >>"$out/all.txt"
        timeout 300 "$build/bench/gloo_allreduce" "$mib" | tee "$out/g.txt"
        collect gloo "$r" <"$out/g.txt" >>"$out/all.txt"
    done
done

echo "== $rounds rounds: median MB/s (bus bandwidth); ratios taken within" \
    "each round, median [lowest - highest]"
awk 'function sort(v, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
     }
     function median(v, n) {
        sort(v, n)
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
     }
     # Median MB/s of one program at one size.
     function mbs(who, mib,   r, n, v) {
        n = 0
        for (r = 1; r <= nr; r++) if ((who, mib, r) in bw) v[++n] = bw[who, mib, r]
        return n ? median(v, n) : 0
     }
     # "median [low - high]" of a/b over the rounds that have both.
     function ratio(a, b, mib,   r, n, v) {
        n = 0
        for (r = 1; r <= nr; r++)
            if ((a, mib, r) in bw && (b, mib, r) in bw && bw[b, mib, r] > 0)
                v[++n] = bw[a, mib, r] / bw[b, mib, r]
        if (!n) return "-"
        m = median(v, n)
        return sprintf("%.2f [%.2f - %.2f]", m, v[1], v[n])
     }
     {
        if (!($2 in seen)) { seen[$2] = 1; order[++ns] = $2 }
        bw[$1, $2, $4] = $3
        if ($4 > nr) nr = $4
     }
     END {
        for (o = 1; o <= ns; o++) {
            mib = order[o]
            printf "%g MiB: MPI %.1f, Gloo %.1f; preduce %.1f, in place " \
                   "%.1f\n", mib, mbs("mpi", mib), mbs("gloo", mib),
                   mbs("preduce", mib), mbs("preduce-in-place", mib)
            printf "  preduce / MPI %s, / Gloo %s\n",
                   ratio("preduce", "mpi", mib), ratio("preduce", "gloo", mib)
            printf "  in place / MPI %s, / Gloo %s\n",
                   ratio("preduce-in-place", "mpi", mib),
                   ratio("preduce-in-place", "gloo", mib)
        }
     }' "$out/all.txt"
