#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make check-rdma`, inside the Soft-RoCE guest (tests/rdma/run-in-guest.sh):
#  1. tests/rdma/bw.sh: the all-reduce bandwidth of 2 daemons over rxe0 next
#     to ib_write_bw on the same rxe0 in the same guest, as a ratio (target
#     >= 0.8 at 1 MiB);
#  2. the multi-daemon integration tests with transport = rdma
#     (build/tests/itest_rdma: 3 daemons, 6 trainers, allreduce and
#     constant, sizes 1, 1000003, 4194304, 20 steps; a peer killed
#     mid-transfer), which also check that data bytes went over RDMA only.
# On a machine with a real RDMA device, run the same binaries directly.
set -euo pipefail

# shellcheck source=tests/rdma/guest-env.sh
. "$(dirname "$0")/guest-env.sh"

# The bandwidth round first, in the freshly booted guest (after the
# integration tests one CI run gave 0.66 of ib_write_bw; first, runs gave
# 0.65 to 0.93: the host's load moves it more). One round at 16 MiB tensors
# (1 MiB RDMA writes, the target's size) keeps `make check-rdma` bounded when the host is slow (the guest ran 470 of its
# 540 s once); `make bench-rdma` runs three rounds at 1 and 16 MiB (the
# figures in docs/benchmarks.md come from there).
# A failed bandwidth round still lets the integration tests run.
bw=0
PREDUCE_BW_ROUNDS=${PREDUCE_BW_ROUNDS:-1} "$(dirname "$0")/bw.sh" 16 || bw=$?

echo "== integration tests over $dev"
"$build/tests/itest_rdma"
[ "$bw" -eq 0 ] || { echo "check.sh: the bandwidth round failed ($bw)" >&2; exit "$bw"; }
