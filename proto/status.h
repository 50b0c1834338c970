/* SPDX-License-Identifier: MIT */
/*
 * The codes a failed reduce ends with, as a trainer sees them: the one
 * table behind preduce.h's preduce_reduce() and docs/operations.md's
 * "Failure behaviour". The node daemon answers every reduce through it,
 * whatever the engine, a transport, the scheduler or a peer produced;
 * libpreduce passes what a daemon sends through it too, so that an older
 * daemon's codes reach no trainer either.
 */
#ifndef PR_STATUS_H
#define PR_STATUS_H

#include <stdint.h>

/*
 * 0, -ETIMEDOUT, -ECONNRESET, -EINVAL, -EBUSY and -ENOMEM as they are.
 * Any other status (-ECANCELED or -EPIPE from a transport, -EIO from a
 * device, -EPROTO from a peer's data, -ENOTCONN from a missing link, a
 * value out of errno's range...) says that the group failed for a reason
 * outside this trainer's call, with a peer, a link or the scheduler:
 * -ECONNRESET.
 */
int pr_reduce_status(int64_t status);

#endif
