/* SPDX-License-Identifier: MIT */
#include "daemon/base/fdlimit.h"

#include <errno.h>
#include <sys/resource.h>

int pr_fdlimit_raise(uint64_t want, uint64_t *before, uint64_t *after)
{
    struct rlimit rl;
    *before = *after = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    *before = *after = (uint64_t)rl.rlim_cur;
    if (rl.rlim_cur == RLIM_INFINITY || (uint64_t)rl.rlim_cur >= want)
        return 0;
    rlim_t to = (rlim_t)want;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < to)
        to = rl.rlim_max;
    if (to <= rl.rlim_cur)
        return 0;
    rl.rlim_cur = to;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    *after = (uint64_t)to;
    return 0;
}
