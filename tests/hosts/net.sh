#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The network of the multi-host tests (tests/hosts/): hosts are network
# namespaces on one bridge, which lives in a namespace of its own, so that
# nothing of it (no address, no interface, no qdisc) is in the namespace
# the test was started in.
#
#   net.sh up P H             namespaces P-sw (bridge br0) and P-h0..P-h<H-1>,
#                             host i at 10.77.0.<i+1>/24 on its eth0, whose
#                             other end is port h<i> of the bridge
#   net.sh cap P I RATE [BURST [QUEUE]]
#                             host i's link capped at RATE (tc units, e.g.
#                             100mbit) each way: tbf on its eth0 (sending)
#                             and on the bridge's port h<i> (receiving);
#                             BURST (64kb) is what may pass at once. QUEUE
#                             fifo (the default): one queue of 200 ms;
#                             prio: packets marked low-delay (TOS 0x10)
#                             go before the others (htb, two classes of
#                             200 ms each), as pfifo_fast sends them, and
#                             as fq_codel sends a sparse flow's (the
#                             scheduler's); RATE then an integer of kbit,
#                             mbit or gbit
#   net.sh racks P IN CROSS R0 R1 ...
#                             host i in rack R<i>; each way of its link
#                             carries IN to hosts of its rack and CROSS to
#                             the others (htb, a class per destination)
#   net.sh trunk P RATE R0 R1 ...
#                             two racks on two bridges joined by one cable
#                             (the trunk, veth t0-t1) capped at RATE each
#                             way (tbf on t0 and t1): host i's port moves
#                             to bridge br<R_i> (R_i 0 or 1); traffic
#                             between the racks shares the trunk, as on a
#                             real uplink (what ring order is measured on)
#   net.sh link P I down|up   host i's cable out or in (port h<i>): its
#                             processes and addresses stay, packets to and
#                             from it are dropped
#   net.sh down P             kills what still runs in every namespace
#                             named P-* (a relay, a daemon of a test that
#                             died), then deletes them
#
# Every command is bounded (ip and tc do not wait on the network).
set -euo pipefail

cmd=${1:?usage: net.sh up|cap|racks|trunk|link|down PREFIX ...}
p=${2:?prefix}
shift 2

addr() { echo "10.77.0.$(($1 + 1))"; }
in_ns() { ip netns exec "$1" "${@:2}"; }

# Replaces the root qdisc of dev in namespace ns by tbf at rate.
tbf() {
    local ns=$1 dev=$2 rate=$3 burst=$4
    in_ns "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" \
        burst "$burst" latency 200ms
}

# tbf's cap with a queue that sends low-delay packets (TOS 0x10, which
# the daemon sets on its scheduler and express connections) first: htb
# at rate, class 1:10 for those (prio 0, a twentieth guaranteed, all of
# the rate when the other is idle), 1:20 for the rest, each with 200 ms
# of queue (bfifo), as tbf's latency gives the fifo. The filter is IPv4's
# (the hosts' addresses) and leaves the ECN bits out.
tbf_prio() {
    local ns=$1 dev=$2 rate=$3 burst=$4 n kbit
    n=${rate%[kmg]bit}
    if ! [[ $n =~ ^[0-9]+$ && $rate =~ ^[0-9]+[kmg]bit$ ]]; then
        echo "net.sh: cap with prio: rate $rate is not <integer>kbit|mbit|gbit" >&2
        exit 2
    fi
    case $rate in
    *kbit) kbit=$n ;;
    *mbit) kbit=$((n * 1000)) ;;
    *gbit) kbit=$((n * 1000000)) ;;
    esac
    local low=$((kbit / 20 > 8 ? kbit / 20 : 8)) queue=$((kbit * 25))
    if ((kbit <= low)); then
        echo "net.sh: cap with prio: rate $rate is below 9kbit" >&2
        exit 2
    fi
    # replace would keep an earlier htb's classes (racks, a cap before).
    in_ns "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
    in_ns "$ns" tc qdisc add dev "$dev" root handle 1: htb default 20
    in_ns "$ns" tc class add dev "$dev" parent 1: classid 1:1 htb \
        rate "${kbit}kbit" burst "$burst" quantum 60000
    in_ns "$ns" tc class add dev "$dev" parent 1:1 classid 1:10 htb \
        rate "${low}kbit" ceil "${kbit}kbit" burst "$burst" prio 0 quantum 60000
    in_ns "$ns" tc class add dev "$dev" parent 1:1 classid 1:20 htb \
        rate "$((kbit - low))kbit" ceil "${kbit}kbit" burst "$burst" prio 1 quantum 60000
    in_ns "$ns" tc qdisc add dev "$dev" parent 1:10 bfifo limit "$queue"
    in_ns "$ns" tc qdisc add dev "$dev" parent 1:20 bfifo limit "$queue"
    in_ns "$ns" tc filter add dev "$dev" parent 1: protocol ip prio 1 \
        u32 match ip tos 0x10 0xfc flowid 1:10
}

# htb on dev in ns: class 1:10 (IN) by default, 1:20 (CROSS) for packets
# whose `dir` (dst or src) address is one of the hosts given.
htb2() {
    local ns=$1 dev=$2 in=$3 cross=$4 dir=$5
    shift 5
    in_ns "$ns" tc qdisc replace dev "$dev" root handle 1: htb default 10
    in_ns "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb \
        rate "$in" burst 64kb quantum 60000
    in_ns "$ns" tc class add dev "$dev" parent 1: classid 1:20 htb \
        rate "$cross" burst 64kb quantum 60000
    local j
    for j in "$@"; do
        in_ns "$ns" tc filter add dev "$dev" parent 1: protocol ip prio 1 \
            u32 match ip "$dir" "$(addr "$j")/32" flowid 1:20
    done
}

case $cmd in
up)
    h=${1:?hosts}
    ip netns add "$p-sw"
    ip -n "$p-sw" link set lo up
    ip -n "$p-sw" link add br0 type bridge
    ip -n "$p-sw" link set br0 up
    for ((i = 0; i < h; i++)); do
        ip netns add "$p-h$i"
        ip -n "$p-h$i" link set lo up
        ip -n "$p-sw" link add "h$i" type veth peer name eth0 netns "$p-h$i"
        ip -n "$p-sw" link set "h$i" master br0
        ip -n "$p-sw" link set "h$i" up
        ip -n "$p-h$i" addr add "$(addr "$i")/24" dev eth0
        ip -n "$p-h$i" link set eth0 up
    done
    ;;
cap)
    i=${1:?host} rate=${2:?rate} burst=${3:-64kb} queue=${4:-fifo}
    case $queue in
    fifo)
        tbf "$p-h$i" eth0 "$rate" "$burst"
        tbf "$p-sw" "h$i" "$rate" "$burst"
        ;;
    prio)
        tbf_prio "$p-h$i" eth0 "$rate" "$burst"
        tbf_prio "$p-sw" "h$i" "$rate" "$burst"
        ;;
    *)
        echo "net.sh: cap: queue $queue is not fifo or prio" >&2
        exit 2
        ;;
    esac
    ;;
racks)
    in=${1:?rate within a rack} cross=${2:?rate across racks}
    shift 2
    racks=("$@")
    for ((i = 0; i < ${#racks[@]}; i++)); do
        others=()
        for ((j = 0; j < ${#racks[@]}; j++)); do
            [ "${racks[j]}" != "${racks[i]}" ] && others+=("$j")
        done
        # Sending: by destination; receiving: by source.
        htb2 "$p-h$i" eth0 "$in" "$cross" dst "${others[@]}"
        htb2 "$p-sw" "h$i" "$in" "$cross" src "${others[@]}"
    done
    ;;
trunk)
    rate=${1:?rate of the trunk}
    shift
    ip -n "$p-sw" link add br1 type bridge
    ip -n "$p-sw" link set br1 up
    ip -n "$p-sw" link add t0 type veth peer name t1
    ip -n "$p-sw" link set t0 master br0
    ip -n "$p-sw" link set t1 master br1
    ip -n "$p-sw" link set t0 up
    ip -n "$p-sw" link set t1 up
    # t0 sends what br0 hands to br1; t1 the other way.
    tbf "$p-sw" t0 "$rate" 64kb
    tbf "$p-sw" t1 "$rate" 64kb
    racks=("$@")
    for ((i = 0; i < ${#racks[@]}; i++)); do
        [ "${racks[i]}" = 1 ] && ip -n "$p-sw" link set "h$i" master br1
    done
    ;;
link)
    i=${1:?host} state=${2:?down or up}
    ip -n "$p-sw" link set "h$i" "$state"
    ;;
down)
    for ns in $(ip netns list | awk '{print $1}'); do
        case $ns in
        "$p"-*)
            # A namespace outlives its deletion while a process is in it.
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            if [ -n "$pids" ]; then
                # shellcheck disable=SC2086
                kill -KILL $pids 2>/dev/null || true
            fi
            ip netns del "$ns"
            ;;
        esac
    done
    ;;
*)
    echo "net.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
