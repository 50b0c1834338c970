/* SPDX-License-Identifier: MIT */
/*
 * The process's file descriptor limit (RLIMIT_NOFILE). Each trainer, peer
 * stream, scheduler link, metrics client and connection not yet past its
 * hello holds a descriptor; many distributions start services with a soft
 * limit of 1024, which a node with many trainers or peers, or a scheduler
 * of a large job, runs into: accept() then fails and new connections are
 * refused while idle ones hold their places. As Redis and nginx do, the
 * daemon raises its soft limit towards what it may need at start.
 */
#ifndef PR_FDLIMIT_H
#define PR_FDLIMIT_H

#include <stdint.h>

/*
 * Raises the soft RLIMIT_NOFILE to `want` if it is lower, as far as the
 * hard limit allows: 0 with *before and *after the soft limits before and
 * after (*after < want when the hard limit is lower), or a negative errno
 * from getrlimit/setrlimit (the limit is then as it was).
 */
int pr_fdlimit_raise(uint64_t want, uint64_t *before, uint64_t *after);

#endif
