# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034  # used by the scripts that source it
# Sourced by the scripts that run inside the Soft-RoCE guest (check.sh,
# bw.sh): refuses to run anywhere else, and sets what the tests and the
# benchmark read. PREDUCE_RDMA_SETS adds node settings ("key=value ...").
[ "${PREDUCE_RDMA_GUEST:-}" = 1 ] || {
    echo "$(basename "$0"): runs inside the guest: tests/rdma/run-in-guest.sh $0" >&2
    exit 2
}
dev=$PREDUCE_RDMA_DEV
addr=$PREDUCE_RDMA_ADDR
gidx=$PREDUCE_RDMA_GID_INDEX
out=$PREDUCE_RDMA_OUT
build=${PREDUCE_BUILD:-$PWD/build}
export PREDUCED=$build/preduced PREDUCE_BUILD=$build
# Under TCG on a busy host a daemon's loop can stall for seconds (a node
# dropped its scheduler link after 5.4 s of silence while the host ran
# other builds): both ends wait 15 s before judging the other gone. Tests
# that kill a daemon on purpose set their own timeouts, which win.
export PREDUCE_TEST_NODE_SETS="transport.type=rdma transport.rdma_device=$dev transport.gid_index=$gidx scheduler.node_timeout_ms=15000 ${PREDUCE_RDMA_SETS:-}"
export PREDUCE_TEST_SCHED_SETS="scheduler.node_timeout_ms=15000"
