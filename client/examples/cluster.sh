# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shell functions to run a preduce job on this one machine: a scheduler and
# node daemons on loopback ports, each with its own socket and log.
# Sourced by demo.sh and tests/bench/convergence.sh.
#
#   cluster_start DIR POLICY NODES [--set k=v ...]   start; sockets in DIR
#   cluster_socket DIR I                             node I's trainer socket
#   cluster_stop                                     stop what was started

CLUSTER_PIDS=()

# A TCP port on 127.0.0.1 that nothing listens on right now.
cluster_free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }
    done
}

cluster_wait() { # a socket path or a port, up to 5 s
    for _ in $(seq 100); do
        if [[ $1 == /* ]]; then [ -S "$1" ] && return 0
        else (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; fi
        sleep 0.05
    done
    echo "cluster: $1 did not come up" >&2
    return 1
}

cluster_socket() { echo "$1/node$2.sock"; }

cluster_start() {
    local dir=$1 policy=$2 nodes=$3 sport n
    shift 3
    mkdir -p "$dir"
    sport=$(cluster_free_port)
    "$PREDUCED" --role scheduler --set scheduler.listen=127.0.0.1:$sport \
        --set scheduler.policy="$policy" "$@" >"$dir/sched.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    cluster_wait "$sport" || { tail -n 20 "$dir/sched.log" >&2; return 1; }
    # Peer ports: any free one, which the node tells the scheduler (a port
    # picked here could meanwhile be another connection's own).
    for ((n = 0; n < nodes; n++)); do
        "$PREDUCED" --role node --set node.name=node$n \
            --set node.scheduler=127.0.0.1:$sport \
            --set node.socket="$(cluster_socket "$dir" $n)" \
            --set node.data_listen=127.0.0.1:0 \
            >"$dir/node$n.log" 2>&1 &
        CLUSTER_PIDS+=($!)
        cluster_wait "$(cluster_socket "$dir" $n)" ||
            { tail -n 20 "$dir/node$n.log" >&2; return 1; }
    done
}

cluster_stop() {
    local p
    for p in "${CLUSTER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${CLUSTER_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    CLUSTER_PIDS=()
}
