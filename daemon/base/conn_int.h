/* SPDX-License-Identifier: MIT */
/* Between conn.c and conn_batch.c only. */
#ifndef PR_CONN_INT_H
#define PR_CONN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/conn.h"

/*
 * The message frame at f, of payload n, becomes its sealed record in
 * place (room for the tag after it), its header saying so. 0, or < 0
 * with c closed (a spent key).
 */
int pr_conn_seal_msg_at(struct pr_conn *c, uint8_t *f, size_t n);
/*
 * owned[off, off + len) written through libuv's queue; owned is freed
 * when written (or at once on an error). 0 or < 0.
 */
int pr_conn_write_owned(struct pr_conn *c, uint8_t *owned, size_t off,
                        size_t len);
/* pr_conn_send for a conn with a batch: framed into its buffer. */
int pr_conn_send_batched(struct pr_conn *c, const Pr__V1__Msg *m);
/* Writes c's buffer, off the dirty list; 0 or < 0, c left open. */
int pr_conn_flush_out(struct pr_conn *c);
/* c goes off its batch's dirty list (flushed, or closing). */
void pr_conn_batch_unlink(struct pr_conn *c);

#endif
