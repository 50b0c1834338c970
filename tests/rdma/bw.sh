#!/usr/bin/env bash
# Inside the Soft-RoCE guest (tests/rdma/run-in-guest.sh; `make bench-rdma`):
# the all-reduce bandwidth of 2 daemons over rxe0 next to ib_write_bw on the
# same rxe0 in the same guest, as a ratio (target >= 0.8 at 1 MiB).
#   bw.sh [MiB ...]     tensor sizes (default: 1 16)
set -euo pipefail

# shellcheck source=tests/rdma/guest-env.sh
. "$(dirname "$0")/guest-env.sh"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1 16)

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

# The emulated guest's figures swing by +-20% from one run to the next, so
# the anchor and the all-reduce alternate for BW_ROUNDS rounds and the
# ratios are taken between medians (PREDUCE_BW_ROUNDS, PREDUCE_BW_RUN_S
# seconds per all-reduce run).
rounds=${PREDUCE_BW_ROUNDS:-3}
: >"$out/bw.txt"
for r in $(seq "$rounds"); do
    echo "== round $r of $rounds"
    uni=$(ib_bw)
    bi=$(ib_bw -b)
    echo "ib_write_bw -s 1048576 -n 200: $uni MB/s one way; with -b $bi MB/s" \
        "both ways together"
    echo "uni $uni" >>"$out/bw.txt"
    echo "bi $bi" >>"$out/bw.txt"
    BENCH_RUN_S=${PREDUCE_BW_RUN_S:-6} "$build/bench/bench_allreduce" \
        "${sizes[@]}" | tee "$out/allreduce-$r.log"
    # Bus bandwidth per tensor size in MiB.
    awk '/bus bandwidth/ { for (i = 1; i <= NF; i++) if ($i == "bandwidth")
        print "ar" $4 ($7 == "in" ? "+in-place" : ""), $(i + 1) }' \
        "$out/allreduce-$r.log" >>"$out/bw.txt"
done

# Each daemon sends its bus bandwidth while the other does the same, like
# ib_write_bw -b; the one-way figure is the stricter anchor.
echo "== medians of $rounds rounds"
awk 'function median(k,   n, i, j, t, v) {
        n = cnt[k]
        for (i = 1; i <= n; i++) v[i] = val[k, i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
     }
     { if (!($1 in cnt)) order[++nk] = $1; val[$1, ++cnt[$1]] = $2 }
     END {
        uni = median("uni"); bi = median("bi")
        printf "ib_write_bw: %.2f MB/s one way, %.2f MB/s per direction " \
               "with -b\n", uni, bi / 2
        for (o = 1; o <= nk; o++) if ((k = order[o]) ~ /^ar/) {
            bw = median(k)
            mode = substr(k, 3); sub(/\+/, " MiB tensors, ", mode)
            if (mode !~ /in-place/) mode = mode " MiB tensors"
            printf "ratio at %s: all-reduce %.2f MB/s = %.2f of " \
                   "ib_write_bw one way, %.2f of its per-direction rate with " \
                   "-b (target >= 0.80)\n", mode, bw, bw / uni,
                   bw / (bi / 2)
        }
     }' "$out/bw.txt"
