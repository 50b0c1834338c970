/* SPDX-License-Identifier: MIT */
#include "proto/status.h"

#include <errno.h>

int pr_reduce_status(int64_t status)
{
    switch (status) {
    case 0:
    case -ETIMEDOUT:
    case -ECONNRESET:
    case -EINVAL:
    case -EBUSY:
    case -ENOMEM:
        return (int)status;
    default:
        return -ECONNRESET;
    }
}
