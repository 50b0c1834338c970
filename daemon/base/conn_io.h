/* SPDX-License-Identifier: MIT */
/*
 * A thread that moves the bulk bytes of some connections (conn.h) off the
 * loop: a large chunk's payload read into its place, a data frame's
 * bytes written, while the loop keeps everything else (frame headers,
 * messages, what the bytes mean).
 *
 * Why: the loop that reads a large reduce's chunks also serves every
 * other job's small ones, and on loopback or any TCP path the kernel's
 * copies of the large one (a receive of a megabyte, a send that on
 * loopback also runs the receiving side) are most of the loop thread's
 * time: a small reduce's chunk, on a connection of its own, still waited
 * for the loop to finish them (make bench-jobs, docs/benchmarks.md). NCCL
 * keeps its network transfers on a proxy thread and Gloo on its device
 * thread for the same reason. With this thread, the loop hands a landing
 * payload or a data frame over, and the thread does the system calls,
 * one connection's at a time, and tells the loop when each is done
 * (uv_async). The thread touches only what it was handed: the socket's
 * descriptor and the memory of one operation.
 *
 * One thread serves a transport's connections (pr_conn_set_io); the loop
 * owns it, creates it before and destroys it after them.
 */
#ifndef PR_CONN_IO_H
#define PR_CONN_IO_H

#include <stdint.h>
#include <uv.h>

struct pr_conn_io;

/* A thread for loop's connections: 0 and *out, or a negative errno. */
int pr_conn_io_create(uv_loop_t *loop, struct pr_conn_io **out);
/*
 * Stops and joins the thread; the struct is freed when its handle closed
 * (then on_closed(arg), which may be NULL). Every connection given it is
 * closed before. NULL is a no-op.
 */
void pr_conn_io_destroy(struct pr_conn_io *io, void (*on_closed)(void *arg),
                        void *arg);

/*
 * Whether the connections given io hand it their bytes now (from its
 * creation, yes): the loop's switch, any time. A connection whose writes
 * the thread holds keeps giving it its writes until they are done, so
 * that none passes another.
 */
void pr_conn_io_set_on(struct pr_conn_io *io, int on);
int pr_conn_io_on(const struct pr_conn_io *io);
/* Bytes the thread read, and wrote, ever. */
uint64_t pr_conn_io_read(const struct pr_conn_io *io);
uint64_t pr_conn_io_written(const struct pr_conn_io *io);

/*
 * A payload or frame of at least this many bytes goes to the thread; a
 * smaller one costs less on the loop than the handover would.
 */
#define PR_CONN_IO_MIN (64u << 10)

#endif
