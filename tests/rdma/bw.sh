#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Inside the Soft-RoCE guest (tests/rdma/run-in-guest.sh; `make bench-rdma`):
# the all-reduce bandwidth of 2 daemons over rxe0 next to ib_write_bw on the
# same rxe0 in the same guest, as a ratio (target >= 0.8 at 1 MiB).
#   bw.sh [MiB ...]     tensor sizes (default: 1 16)
# PREDUCE_RDMA_MTU sets the MTU of rxe0's netdev first (1500 by default,
# so RDMA packets of 1024 bytes; 9000 gives 4096, as on a RoCE fabric with
# jumbo frames). Both ib_write_bw and the daemons use the port's active MTU.
set -euo pipefail

# shellcheck source=tests/rdma/guest-env.sh
. "$(dirname "$0")/guest-env.sh"
sizes=("$@")
if [ -n "${PREDUCE_RDMA_MTU:-}" ]; then
    old_mtu=$(cat "/sys/class/net/$PREDUCE_RDMA_NETDEV/mtu")
    # Whatever runs after this script in the guest gets the MTU it had.
    trap 'ip link set dev "$PREDUCE_RDMA_NETDEV" mtu "$old_mtu"' EXIT
    ip link set dev "$PREDUCE_RDMA_NETDEV" mtu "$PREDUCE_RDMA_MTU"
fi
mtu=$(ibv_devinfo -d "$dev" | awk '$1 == "active_mtu:" {print $2}')
echo "rdma: $dev over $PREDUCE_RDMA_NETDEV, active MTU $mtu bytes"
[ ${#sizes[@]} -gt 0 ] || sizes=(1 16)

# ib_write_bw [-b]: its average MB/s at 1 MiB messages, one RC stream
# (with -b, both directions at once: the all-reduce's traffic pattern, and
# the figure is then the sum of both directions). Its queue pair gets the
# daemons' ack timeout (-u; perftest's own default is 14, with which
# Soft-RoCE here resends 100-200 times per run data that was not lost).
ib_bw() {
    local port=18515
    timeout 60 ib_write_bw -d "$dev" -x "$gidx" -s 1048576 -n 200 -p $port \
        -u "$ack_timeout" -F "$@" >"$out/bw-server.log" 2>&1 &
    local spid=$!
    for _ in $(seq 100); do
        ss -Hltn "sport = :$port" | grep -q . && break
        sleep 0.1
    done
    timeout 60 ib_write_bw -d "$dev" -x "$gidx" -s 1048576 -n 200 -p $port \
        -u "$ack_timeout" -F "$@" "$addr" >"$out/bw-client.log" 2>&1
    wait "$spid"
    awk '$1 == 1048576 && NF >= 5 {print $4}' "$out/bw-client.log" | tail -n 1
}

# The emulated guest's speed drifts by +-30% over tens of seconds (other
# work on the host), so every all-reduce run sits between two ib_write_bw
# runs and is compared with the mean of those two; the figures are the
# medians of these per-run ratios over PREDUCE_BW_ROUNDS rounds
# (PREDUCE_BW_RUN_S seconds per all-reduce run and mode).
rounds=${PREDUCE_BW_ROUNDS:-5}
# The chunk size and ack timeout the daemons run with, as preduced itself
# resolves them (its defaults and the tests' --set values, so that
# PREDUCE_RDMA_SETS may change them and no default is written twice).
sets=()
for kv in $PREDUCE_TEST_NODE_SETS; do sets+=(--set "$kv"); done
conf=$("$PREDUCED" -T --role node "${sets[@]}")
setting() { awk -v k="$1" '$1 == k && $2 == "=" {print $3}' <<<"$conf"; }
chunk_kb=$(setting chunk_kb)
ack_timeout=$(setting rdma_timeout)
[ -n "$chunk_kb" ] && [ -n "$ack_timeout" ] || {
    echo "bw.sh: preduced -T gave no chunk_kb or rdma_timeout" >&2
    exit 1
}
# Soft-RoCE's count of writes it sent again (an ack came too late) and of
# packets the receiver got twice: both waste CPU that the figures share.
hwc=/sys/class/infiniband/$dev/ports/1/hw_counters
resent() { cat "$hwc/completer_retry_err" "$hwc/duplicate_request" 2>/dev/null | paste -sd/; }
resent0=$(resent)
: >"$out/bw.txt"
uni=$(ib_bw)
for r in $(seq "$rounds"); do
    echo "== round $r of $rounds"
    bi=$(ib_bw -b)
    echo "ib_write_bw -s 1048576 -n 200 -b: $bi MB/s both ways together"
    for mib in "${sizes[@]}"; do
        echo "ib_write_bw -s 1048576 -n 200: $uni MB/s one way"
        BENCH_RUN_S=${PREDUCE_BW_RUN_S:-6} "$build/bench/bench_allreduce" \
            "$mib" | tee "$out/allreduce-$r-$mib.log"
        next=$(ib_bw)
        # One line per mode: key, bus bandwidth, the anchors around it.
        awk -v a="$uni" -v b="$next" -v bi="$bi" '/bus bandwidth/ {
                for (i = 1; i <= NF; i++) if ($i == "bandwidth") bw = $(i + 1)
                print "ar" $4 ($7 == "in" ? "+in-place" : ""), bw, a, b, bi
            }' "$out/allreduce-$r-$mib.log" >>"$out/bw.txt"
        uni=$next
    done
done
echo "ib_write_bw -s 1048576 -n 200: $uni MB/s one way"

# Each daemon sends its bus bandwidth while the other does the same, like
# ib_write_bw -b; the one-way figure is the stricter anchor.
echo "== medians of $rounds rounds (each run against the ib_write_bw runs" \
    "just before and after it)"
awk 'function median(k, x,   n, i, j, t, v) {
        n = cnt[k]
        for (i = 1; i <= n; i++) v[i] = val[k, x, i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
     }
     {
        if (!($1 in cnt)) order[++nk] = $1
        i = ++cnt[$1]
        uni = ($3 + $4) / 2
        val[$1, "bw", i] = $2; val[$1, "uni", i] = uni
        val[$1, "r1", i] = $2 / uni; val[$1, "r2", i] = $2 / ($5 / 2)
        lo[$1] = i == 1 || $2 / uni < lo[$1] ? $2 / uni : lo[$1]
        hi[$1] = i == 1 || $2 / uni > hi[$1] ? $2 / uni : hi[$1]
     }
     END {
        for (o = 1; o <= nk; o++) {
            k = order[o]
            mib = substr(k, 3) + 0
            # 2 daemons: each writes its half of the tensor in chunks of
            # transport.chunk_kb (1024 by default).
            kib = mib * 512 < chunk_kb ? mib * 512 : chunk_kb
            w = kib >= 1024 ? sprintf("%g MiB", kib / 1024) \
                            : sprintf("%g KiB", kib)
            mode = sprintf("%g MiB tensors (%s RDMA writes)%s", mib, w,
                           k ~ /in-place/ ? ", in place" : "")
            printf "ratio at %s: all-reduce %.2f MB/s, ib_write_bw %.2f " \
                   "MB/s one way: %.2f (runs %.2f to %.2f); %.2f of its " \
                   "per-direction rate with -b%s\n", mode, median(k, "bw"),
                   median(k, "uni"), median(k, "r1"), lo[k], hi[k],
                   median(k, "r2"),
                   kib == 1024 ? " (target >= 0.80 at 1 MiB writes)" : ""
        }
     }' chunk_kb="$chunk_kb" "$out/bw.txt"
# Counters are per device (ib_write_bw's and the daemons' together).
echo "$dev resends/duplicate packets over the whole run: $resent0 before," \
    "$(resent) after"
