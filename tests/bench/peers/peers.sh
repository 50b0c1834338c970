#!/usr/bin/env bash
# preduce's all-reduce next to MPI's and Gloo's on this machine, over TCP on
# 127.0.0.1 for all three (`make bench-peers`):
#   - preduce: build/bench/bench_allreduce (2 node daemons, 1 trainer each,
#     policy allreduce; tensors unchanged on error, and in place);
#   - MPI: Open MPI's MPI_Allreduce, 2 ranks, --mca btl tcp,self, one core
#     each;
#   - Gloo: AllreduceRingChunked, 2 processes, its TCP transport.
# All print the bus bandwidth of 2 workers (tensor bytes per all-reduce over
# the time of one) and check their results. They alternate for
# PREDUCE_PEERS_ROUNDS rounds (default 3) and the ratios are taken between
# medians.
#   peers.sh [MiB ...]     tensor sizes (default: 1 16)
set -euo pipefail

build=${PREDUCE_BUILD:-$PWD/build}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1 16)
rounds=${PREDUCE_PEERS_ROUNDS:-3}
export BENCH_RUN_S=${PREDUCE_PEERS_RUN_S:-5}
out=$(mktemp -d /tmp/preduce-peers.XXXXXX)
trap 'rm -rf "$out"' EXIT
# Open MPI refuses root unless told, and would use shared memory on one
# machine: TCP over loopback, like the daemons' links here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each worker plays a host with one core: MPI's ranks bound to a core each,
# and each node daemon with its trainer on a CPU of its own (the harness's
# PREDUCE_TEST_PIN_CPUS; the daemon's reduce threads follow its CPUs), so
# neither side's processes or threads contend for the other's core.
mpi=(mpirun -n 2 --oversubscribe --bind-to core --mca btl tcp,self
    --mca btl_tcp_if_include lo)
export PREDUCE_TEST_PIN_CPUS=1

# "name MiB bus-bandwidth" lines from a run's output.
collect() {
    awk -v who="$1" '/bus bandwidth/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "bandwidth") bw = $(i + 1)
            if ($i == "MiB") mib = $(i - 1)
        }
        print who ($0 ~ / in place/ ? "-in-place" : ""), mib, bw
    }'
}

nproc=$(nproc)
echo "== $nproc CPUs; TCP over 127.0.0.1 for all; $BENCH_RUN_S s per run"
for r in $(seq "$rounds"); do
    echo "== round $r of $rounds"
    "$build/bench/bench_allreduce" "${sizes[@]}" | tee "$out/p.txt" |
        grep -v '^  cpu'
    collect preduce <"$out/p.txt" >>"$out/all.txt"
    timeout 300 "${mpi[@]}" "$build/bench/mpi_allreduce" "${sizes[@]}" |
        tee "$out/m.txt"
    collect mpi <"$out/m.txt" >>"$out/all.txt"
    timeout 300 "$build/bench/gloo_allreduce" "${sizes[@]}" | tee "$out/g.txt"
    collect gloo <"$out/g.txt" >>"$out/all.txt"
done

echo "== medians of $rounds rounds, bus bandwidth in MB/s"
awk 'function median(k,   n, i, j, t, v) {
        n = cnt[k]
        for (i = 1; i <= n; i++) v[i] = val[k, i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
     }
     {
        k = $1 " " $2
        if (!($2 in seen)) { seen[$2] = 1; order[++ns] = $2 }
        val[k, ++cnt[k]] = $3
     }
     END {
        for (o = 1; o <= ns; o++) {
            mib = order[o]
            m = median("mpi " mib); g = median("gloo " mib)
            p = median("preduce " mib); q = median("preduce-in-place " mib)
            printf "%g MiB: MPI %.1f, Gloo %.1f; preduce %.1f (%.2f of " \
                   "MPI, %.2f of Gloo), in place %.1f (%.2f of MPI, %.2f " \
                   "of Gloo)\n", mib, m, g, p, p / m, p / g, q, q / m, q / g
        }
     }' "$out/all.txt"
