/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the scheduler core's unit tests (test_sched_core*.c),
 * linked into each of their binaries (and, unused, into every other unit
 * binary: hence the sf_ prefix).
 *
 * The tests drive a struct pr_sched_core directly with a fake clock (times
 * in microseconds); nothing here keeps state between calls.
 */
#ifndef SCHED_FIXTURE_H
#define SCHED_FIXTURE_H

#include <stdint.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"

/*
 * Parameters for `policy`: P = 4, groups of 2 or more, a 5 ms window
 * (0.01 to 10 ms), uniform weights, staleness alpha 0.9.
 */
struct pr_sched_params sf_params(int policy);
/* A core with workers 0 .. n-1, worker r on node r / 2. */
struct pr_sched_core *sf_make(const struct pr_sched_params *p, uint32_t n);
/* Worker `rank` is ready with `version`; its READY has seq 100 + rank. */
void sf_ready(struct pr_sched_core *c, uint32_t rank, uint64_t version,
              uint64_t now_us);
/* No group is due at now_us. */
void sf_expect_none(struct pr_sched_core *c, uint64_t now_us);
/*
 * The next group must be exactly `ranks`, in this order; it is stored in
 * *out (which the caller then finishes) or, if out is NULL, finished here.
 */
void sf_expect_group(struct pr_sched_core *c, uint64_t now_us,
                     const uint32_t *ranks, uint32_t n,
                     struct pr_sched_group *out);

#endif
